//! The committer's wake-up queue on SQS FIFO (moto): the converter's announcements
//! arrive as messages of their table's group, one per table; the same announcements
//! sent again (a redelivered conversion) are deduplicated; a queue that does not exist
//! is a configuration error, never a message lost in silence. A held wake-up stays
//! invisible for the seconds asked, then comes back; a receipt the queue does not know
//! is refused, not ignored.

use kfs_aws::SqsWakeups;
use kfs_core::{ErrorKind, WakeupQueue, announcements};
use kfs_plan::naming::TableNaming;
use kfs_plan::wakeup::{Wakeup, tables_of};
use kfs_testkit::LocalStack;

#[tokio::test(flavor = "multi_thread")]
async fn announcements_arrive_once_per_table_in_their_tables_group() {
    let stack = LocalStack::start();
    let (client, url) = stack.wakeup_queue().await;
    let queue = SqsWakeups::new(client.clone(), url.clone());
    let segments: Vec<String> = (0..12)
        .map(|i| format!("default/topic{}/0/segment-{:020}.kfs", i % 11, i))
        .collect();
    let sent = announcements(&TableNaming::default(), segments.iter().map(String::as_str));
    assert_eq!(sent.len(), 11);
    queue
        .send(&sent)
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    // A redelivered conversion announces the same segments again.
    queue
        .send(&sent)
        .await
        .unwrap_or_else(|e| panic!("send again: {e}"));

    let mut received = Vec::new();
    for _ in 0..10 {
        let batch = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap_or_else(|e| panic!("receive: {e:?}"));
        let messages = batch.messages();
        if messages.is_empty() {
            break;
        }
        for message in messages {
            let body = message.body().unwrap_or_default().to_owned();
            let group = message
                .attributes()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
                })
                .cloned()
                .unwrap_or_default();
            let wakeup = Wakeup::parse(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert_eq!(group, wakeup.group_id());
            received.push(body);
            client
                .delete_message()
                .queue_url(&url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await
                .unwrap_or_else(|e| panic!("delete: {e:?}"));
        }
    }
    assert_eq!(received.len(), 11, "{received:?}");
    let (tables, skipped) = tables_of(received.iter().map(String::as_str));
    assert!(skipped.is_empty(), "{skipped:?}");
    let expected: std::collections::BTreeSet<String> =
        sent.iter().map(|(w, _)| w.table.clone()).collect();
    assert_eq!(tables, expected);

    let missing = SqsWakeups::new(client, format!("{url}-missing"));
    let refused = missing
        .send(&sent[..1])
        .await
        .err()
        .unwrap_or_else(|| panic!("a missing queue took the message"));
    assert_eq!(refused.kind, ErrorKind::Config, "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_wakeup_comes_back_after_its_seconds() {
    let stack = LocalStack::start();
    let (client, url) = stack.wakeup_queue().await;
    let queue = SqsWakeups::new(client.clone(), url.clone());
    let sent = announcements(
        &TableNaming::default(),
        ["default/orders/0/segment-00000000000000000000.kfs"],
    );
    queue
        .send(&sent)
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let receive = || async {
        client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap_or_else(|e| panic!("receive: {e:?}"))
            .messages()
            .to_vec()
    };
    let first = receive().await;
    assert_eq!(first.len(), 1, "{first:?}");
    let receipt = first[0].receipt_handle().unwrap_or_default().to_owned();
    queue
        .hold(&[receipt.as_str()], 2)
        .await
        .unwrap_or_else(|e| panic!("hold: {e}"));
    assert!(receive().await.is_empty(), "held, yet delivered at once");
    let mut again = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        again = receive().await;
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(
        again.first().and_then(|m| m.body()),
        first[0].body(),
        "the held wake-up never came back (600 s was the receive's own timeout)"
    );

    let refused = queue
        .hold(&["no-such-receipt"], 2)
        .await
        .err()
        .unwrap_or_else(|| panic!("an unknown receipt was held"));
    assert_eq!(refused.kind, ErrorKind::Config, "{refused}");
}
