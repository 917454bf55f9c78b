//! A deployed stack, as the command line operates it: the stack's outputs name its
//! committer function, and that function's configuration holds the settings the
//! functions run with, read through [`FunctionEnv::from_lookup`] exactly as the
//! functions read them. The operator's own environment supplies only the AWS side
//! (region, credentials, endpoints).

use std::collections::HashMap;

use kfs_core::S3Settings;

use crate::error::ConfigError;
use crate::function_env::FunctionEnv;

/// The output of the stack naming its committer function.
pub const COMMITTER_OUTPUT: &str = "CommitterFunctionName";

/// The settings of the stack `name`'s functions.
pub async fn stack_function_env(name: &str) -> Result<FunctionEnv, ConfigError> {
    let operator = S3Settings::from_env();
    let endpoint = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|e| !e.is_empty());
    let config = crate::aws_config(&operator, endpoint.as_deref()).await;
    let stacks = aws_sdk_cloudformation::Client::new(&config)
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
        .map_err(|e| {
            ConfigError(format!(
                "stack {name}: {}",
                aws_sdk_cloudformation::error::DisplayErrorContext(&e)
            ))
        })?;
    let function = stacks
        .stacks()
        .first()
        .and_then(|stack| {
            stack
                .outputs()
                .iter()
                .find(|output| output.output_key() == Some(COMMITTER_OUTPUT))
        })
        .and_then(|output| output.output_value())
        .ok_or_else(|| {
            ConfigError(format!(
                "stack {name} has no output {COMMITTER_OUTPUT}: is it a kfs-iceberg stack?"
            ))
        })?
        .to_owned();
    let configuration = aws_sdk_lambda::Client::new(&config)
        .get_function_configuration()
        .function_name(&function)
        .send()
        .await
        .map_err(|e| {
            ConfigError(format!(
                "stack {name}: function {function}: {}",
                aws_sdk_lambda::error::DisplayErrorContext(&e)
            ))
        })?;
    let variables: HashMap<String, String> = configuration
        .environment()
        .and_then(|environment| environment.variables())
        .cloned()
        .unwrap_or_default();
    FunctionEnv::from_lookup(&|variable| lookup(&variables, variable))
        .map_err(|e| ConfigError(format!("stack {name}: function {function}: {e}")))
}

/// A variable as the command line sees a deployed function: the AWS side (`AWS_*`)
/// from the operator's environment, everything else from the function's.
fn lookup(function: &HashMap<String, String>, variable: &str) -> Option<String> {
    if variable.starts_with("AWS_") {
        std::env::var(variable).ok()
    } else {
        function.get(variable).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aws_side_is_the_operators_and_the_rest_the_functions() {
        let function = HashMap::from([
            ("LEDGER_TABLE".to_owned(), "ledger".to_owned()),
            (
                "AWS_ENDPOINT_URL".to_owned(),
                "http://function-only".to_owned(),
            ),
        ]);
        assert_eq!(lookup(&function, "LEDGER_TABLE").as_deref(), Some("ledger"));
        assert_ne!(
            lookup(&function, "AWS_ENDPOINT_URL").as_deref(),
            Some("http://function-only")
        );
    }
}
