//! The property tests of kfs-plan's planners, one binary.

mod maintenance_props;
mod planner_props;
