//! What reading a watch event costs: 2,000 pod-sized JSON events (3.5 KiB, labels,
//! containers, managedFields, escaped strings) read through the decoder kubegate uses, beside
//! the same events parsed into a whole `serde_json::Value` tree (what the decoder did before
//! 0.3.0). bench/README.md, "Thousands of watches through a restart".
//!
//!     cargo run --release -p kubegate-wire --example read_events

use kubegate_wire::framing::{Decoder, Framing};
use std::time::{Duration, Instant};

/// Times each event set is read.
const ROUNDS: usize = 20;

fn pod(i: usize) -> String {
    let labels: Vec<String> = (0..20)
        .map(|k| format!(r#""label-{k}":"value-{k}-{i}""#))
        .collect();
    let containers: Vec<String> = (0..4)
        .map(|c| {
            format!(
                r#"{{"name":"c{c}","image":"registry.example/app/c{c}:v1.2.3","env":[{{"name":"A","value":"b\"quoted\""}},{{"name":"B","value":"{}"}}],"resources":{{"limits":{{"cpu":"1","memory":"1Gi"}}}}}}"#,
                "x".repeat(300)
            )
        })
        .collect();
    let managed = r#"{"manager":"kubelet","operation":"Update","fieldsV1":{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:status":{}}}}}}"#;
    format!(
        r#"{{"type":"MODIFIED","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"pod-{i}","namespace":"default","resourceVersion":"{}","labels":{{{}}},"annotations":{{"a":"b"}},"managedFields":[{}]}},"spec":{{"containers":[{}]}},"status":{{"phase":"Running"}}}}}}"#,
        1000 + i,
        labels.join(","),
        [managed; 6].join(","),
        containers.join(",")
    ) + "\n"
}

fn main() {
    let events: Vec<String> = (0..2000).map(pod).collect();
    let stream = events.concat();
    let per_event = |d: Duration| d.as_secs_f64() * 1e6 / (ROUNDS * events.len()) as f64;

    let start = Instant::now();
    let mut versions = 0;
    for _ in 0..ROUNDS {
        for e in &events {
            let v: serde_json::Value = serde_json::from_str(e).expect("an event");
            versions += v["object"]["metadata"]["resourceVersion"].is_string() as usize;
        }
    }
    let tree = start.elapsed();

    let start = Instant::now();
    let mut read = 0;
    for _ in 0..ROUNDS {
        let mut d = Decoder::new(Framing::JsonLines);
        d.push(stream.as_bytes());
        while let Some(e) = d.next_event().expect("an event") {
            read += e.resource_version.is_some() as usize;
        }
    }
    let decoder = start.elapsed();

    assert_eq!(versions, read);
    println!(
        "{} events of {} bytes: parsed into a tree {:.2} µs each; through the decoder (framing included) {:.2} µs each",
        events.len(),
        events[0].len(),
        per_event(tree),
        per_event(decoder)
    );
}
