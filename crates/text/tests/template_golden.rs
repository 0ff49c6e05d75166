//! Chat templates: the models' own templates against llama.cpp's renders, and the
//! Hugging Face environment features templates rely on.

mod common;

use std::collections::BTreeMap;

use gguf::Value;
use text::{ChatMessage, ChatTemplate, Error, RenderOptions};

fn template(model: &str) -> ChatTemplate {
    let file = common::open(model);
    ChatTemplate::from_gguf(&file.header.metadata).expect("chat template")
}

fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
    pairs
        .iter()
        .map(|(r, c)| ChatMessage::new(*r, *c))
        .collect()
}

#[test]
fn renders_equal_llama_cpp() {
    for (model, _) in common::MODELS {
        let tpl = template(model);
        let golden = common::golden(model);
        for case in golden["templates"].as_array().expect("templates") {
            let messages: Vec<ChatMessage> =
                serde_json::from_value(case["messages"].clone()).unwrap();
            let prompt = tpl.render(&messages, true).unwrap();
            assert_eq!(
                prompt,
                case["prompt"].as_str().unwrap(),
                "{model}: {messages:?}"
            );
        }
    }
}

#[test]
fn system_prompt_and_multi_turn() {
    let smol = template("smollm2-135m");
    let convo = msgs(&[
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "Bye"),
    ]);
    assert_eq!(
        smol.render(&convo, false).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
    );
    let qwen = template("qwen2.5-coder-1.5b");
    assert_eq!(
        qwen.render(&convo, true).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(qwen.bos_token(), "<|endoftext|>");
    assert_eq!(qwen.eos_token(), "<|im_end|>");
}

#[test]
fn qwen_renders_tools_as_python_json() {
    let qwen = template("qwen2.5-coder-0.5b");
    let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"city": "Zürich"}}}]);
    let options = RenderOptions {
        add_generation_prompt: true,
        tools: Some(tools),
        ..Default::default()
    };
    let prompt = qwen
        .render_with(&msgs(&[("user", "Weather?")]), &options)
        .unwrap();
    assert!(
        prompt.starts_with("<|im_start|>system\nYou are Qwen"),
        "{prompt}"
    );
    assert!(prompt.contains("# Tools"), "{prompt}");
    assert!(prompt.contains(r#""name": "get_weather""#), "{prompt}");
    assert!(
        prompt.contains("Zürich"),
        "tojson keeps non-ASCII: {prompt}"
    );
}

#[test]
fn python_methods_and_loop_controls() {
    let src = "{% for m in messages %}{% if m.content.strip().startswith('skip') %}{% continue %}{% endif %}\
               [{{ m.role.upper() }}:{{ m.content.strip().split(' ') | join('|') }}]\
               {% if loop.index == 3 %}{% break %}{% endif %}{% endfor %}";
    let tpl = ChatTemplate::new(src, "<s>", "</s>").unwrap();
    let out = tpl
        .render(
            &msgs(&[
                ("user", "  a b "),
                ("user", "skip me"),
                ("bot", "c"),
                ("x", "never"),
            ]),
            false,
        )
        .unwrap();
    assert_eq!(out, "[USER:a|b][BOT:c]");
}

#[test]
fn trim_and_lstrip_blocks_like_hugging_face() {
    let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}\n";
    let tpl = ChatTemplate::new(src, "", "").unwrap();
    assert_eq!(
        tpl.render(&msgs(&[("user", "a"), ("user", "b")]), false)
            .unwrap(),
        "a\nb\n"
    );
}

#[test]
fn context_variables() {
    let src = "{{ bos_token }}{{ add_generation_prompt }}{{ enable_thinking }}{% if tools is defined %}T{% endif %}{{ eos_token }}";
    let tpl = ChatTemplate::new(src, "<s>", "</s>").unwrap();
    let mut extra = BTreeMap::new();
    extra.insert("enable_thinking".to_string(), serde_json::json!(false));
    extra.insert("bos_token".to_string(), serde_json::json!("ignored"));
    let options = RenderOptions {
        add_generation_prompt: true,
        tools: None,
        extra,
    };
    assert_eq!(
        tpl.render_with::<ChatMessage>(&[], &options).unwrap(),
        "<s>TrueFalse</s>",
        "booleans print as Python writes them"
    );
}

#[test]
fn tojson_writes_like_python() {
    let tpl = ChatTemplate::new(
        "{{ {'b': [1, 2.5, none, true], 'a': 'x\"y\\n\u{e9}'} | tojson }}|{{ {'k': [1]} | tojson(indent=2) }}|\
         {{ 'é' | tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}",
        "",
        "",
    )
    .unwrap();
    assert_eq!(
        tpl.render(&[] as &[ChatMessage], false).unwrap(),
        "{\"b\": [1, 2.5, null, true], \"a\": \"x\\\"y\\n\u{e9}\"}|{\n  \"k\": [\n    1\n  ]\n}|\"\\u00e9\"|{\"a\":2,\"b\":1}"
    );
}

#[test]
fn raise_exception_and_strftime_now() {
    let tpl = ChatTemplate::new(
        "{{ raise_exception('Only user and assistant roles are supported!') }}",
        "",
        "",
    )
    .unwrap();
    let err = tpl.render(&[] as &[ChatMessage], false).unwrap_err();
    assert!(matches!(err, Error::Template(_)));
    assert!(
        err.to_string()
            .contains("Only user and assistant roles are supported!"),
        "{err}"
    );

    let tpl = ChatTemplate::new("{{ strftime_now('%Y-%m-%d') }}", "", "").unwrap();
    let date = tpl.render(&[] as &[ChatMessage], false).unwrap();
    assert!(
        date.len() == 10 && date.starts_with("20") && date.as_bytes()[4] == b'-',
        "{date}"
    );
}

#[test]
fn template_errors_are_reported() {
    let err = ChatTemplate::new("{% for m in messages %}", "", "").unwrap_err();
    assert!(matches!(err, Error::Template(_)), "{err}");
    assert!(err.to_string().contains("chat template"), "{err}");

    let md = common::synthetic(&[], &[], &[]);
    assert!(matches!(
        ChatTemplate::from_gguf(&md),
        Err(Error::NoChatTemplate)
    ));

    let md = common::synthetic(
        &[],
        &[],
        &[(
            "tokenizer.chat_template",
            Value::String("{{ messages[0].content }}".into()),
        )],
    );
    let tpl = ChatTemplate::from_gguf(&md).unwrap();
    assert_eq!(tpl.bos_token(), "");
    assert_eq!(tpl.render(&msgs(&[("user", "x")]), false).unwrap(), "x");
}
