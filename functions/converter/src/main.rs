//! The converter Lambda function: builds its clients once, then hands every event to
//! [`kfs_converter::handle`].

use std::sync::Arc;

use kfs_aws::function_env::FunctionEnv;
use kfs_core::{ConverterService, ConverterSettings};
use kfs_segment::DecodeLimits;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    kfs_aws::function_env::init_logging();
    let env = FunctionEnv::from_env()?;
    let service = ConverterService::new(
        env.source()?,
        env.catalog_handle().await?,
        env.ledger().await,
        ConverterSettings {
            bucket: env.bucket.clone(),
            prefix: env.prefix.clone(),
            naming: env.naming.clone(),
            limits: DecodeLimits::default(),
            concurrency: env.convert_concurrency,
            memory_budget_mib: env.memory_budget_mib,
            retry: kfs_core::RetryPolicy::default(),
            schemas: env.schemas().await?,
        },
    );
    let service = Arc::new(match env.wakeups().await {
        Some(queue) => service.with_wakeups(Arc::new(queue)),
        None => service,
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let service = service.clone();
        async move { Ok::<Value, Error>(kfs_converter::handle(&service, &event.payload).await?) }
    }))
    .await
}
