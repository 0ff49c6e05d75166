//! `tandem box` as a process: it says where it listens, a head of the same model and split
//! is welcomed and answered, and a box that would leave the head no blocks refuses to start.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use model::{Model, Part};
use split::head::{BoxClient, StateType};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../model/tests/fixtures/qwen3-tiny.gguf"
);

#[test]
fn a_box_serves_a_head_of_its_model() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "box",
            "-m",
            FIXTURE,
            "--layers",
            "0:1",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["-t", "1", "-c", "256"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the box says where it listens")
            .unwrap();
        if let Some(rest) = line.strip_prefix("tandem box: listening on ") {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    let head = Model::load_stage(FIXTURE, Part::Last(1)).unwrap();
    let mut client = BoxClient::connect(addr, &head, StateType::F16, Default::default()).unwrap();
    client.ping().unwrap();
    let rows = [split::frame::StepRow {
        session: 1,
        pos: 0,
        token: 5,
    }];
    let mut states = vec![0f32; head.hparams.n_embd];
    client.forward_rows(&rows, &[], &mut states).unwrap();
    assert!(states.iter().any(|&v| v != 0.0) && states.iter().all(|v| v.is_finite()));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_box_of_every_block_refuses_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "box",
            "-m",
            FIXTURE,
            "--layers",
            "0:2",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("leaves the head no blocks"), "{err}");
}
