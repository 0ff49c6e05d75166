//! What the split's integration tests share: the fixtures, the sizes, a box on a free port
//! of 127.0.0.1.

use std::net::SocketAddr;

use device::Precision;
use engine::ContextConfig;
use gguf::GgmlType;
use model::{Model, Part};
use split::worker::{Access, BoxWorker};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../model/tests/fixtures/");

/// `file` of the fixtures, or the file at `file` when it is an absolute path.
pub fn load(file: &str, part: Part) -> Model {
    let path = match file.starts_with('/') {
        true => file.to_string(),
        false => format!("{FIXTURES}{file}"),
    };
    Model::load_stage(path, part).unwrap()
}

/// The sizes of both the box and the whole-model reference.
pub fn config() -> ContextConfig {
    ContextConfig {
        n_ctx: 512,
        n_ubatch: 64,
        n_threads: 1,
        n_seq: 2,
        kv_type: GgmlType::F16,
        precision: Precision::Int8,
        device: engine::DeviceKind::Cpu,
        ..ContextConfig::default()
    }
}

/// Starts a box over blocks `0..split` of `file` on a free port of 127.0.0.1, open to the
/// heads `access` lets in; its address and model hash.
pub fn start_box(file: &str, split: usize, access: Access) -> (SocketAddr, u64) {
    let model = load(file, Part::First(split));
    let worker = BoxWorker::new(model, config(), access).unwrap();
    let hash = worker.model_hash();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let _ = worker.serve(listener).await;
        });
    });
    (rx.recv().unwrap(), hash)
}
