//! llama.cpp's built-in chat templates against the prompts its `llama_chat_apply_template`
//! writes (golden/chat_templates.json, from scripts/gen_template_golden.py).

use text::builtin_templates::{builtin, LLAMA_NAMES};
use text::{ChatMessage, ChatTemplate};

#[derive(serde::Deserialize)]
struct Case {
    messages: Vec<ChatMessage>,
    prompt: String,
}

#[test]
fn each_built_in_template_renders_llama_cpps_prompt() {
    let golden: std::collections::BTreeMap<String, Vec<Case>> =
        serde_json::from_str(include_str!("golden/chat_templates.json")).unwrap();
    for (name, cases) in &golden {
        let source = builtin(name).unwrap_or_else(|| panic!("{name} is not built in"));
        let t = ChatTemplate::new(&source, "<s>", "</s>").unwrap();
        for c in cases {
            assert_eq!(t.render(&c.messages, true).unwrap(), c.prompt, "{name}");
        }
    }
    for name in LLAMA_NAMES {
        assert!(golden.contains_key(*name), "{name} has golden prompts");
    }
    assert!(builtin("{{ messages }}").is_none());
}
