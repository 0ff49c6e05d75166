//! The real models' templates and vocabularies, loaded once for the module's tests.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use text::{ChatTemplate, Grammars, Tokenizer};

use super::Tool;

/// Tools of these names, each taking any object.
pub fn untyped_tools(names: &[&str]) -> Vec<Tool> {
    names
        .iter()
        .map(|n| Tool {
            name: n.to_string(),
            description: None,
            parameters: serde_json::json!({"type": "object"}),
        })
        .collect()
}

pub struct Model {
    pub template: ChatTemplate,
    pub source: String,
    pub tok: Arc<Tokenizer>,
}

fn load(file: &str) -> Model {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().unwrap().join("tandem").join("models"));
    let path = dir.join(file);
    let gguf = gguf::GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run `tandem pull`)", path.display()));
    let md = &gguf.header.metadata;
    Model {
        template: ChatTemplate::from_gguf(md).unwrap(),
        source: md
            .opt_str("tokenizer.chat_template")
            .unwrap()
            .unwrap()
            .to_string(),
        tok: Arc::new(Tokenizer::from_gguf(md).unwrap()),
    }
}

pub fn qwen() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| load("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
}

pub fn smollm2() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| load("SmolLM2-135M-Instruct.Q4_1.gguf"))
}

/// The grammar compiler for Qwen 2.5's vocabulary.
pub fn qwen_grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| Grammars::new(qwen().tok.clone()).unwrap())
}
