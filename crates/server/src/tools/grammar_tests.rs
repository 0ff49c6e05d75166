//! Grammars compiled against Qwen 2.5's vocabulary and walked without a model: a target
//! text's tokens are committed one by one, each checked allowed by the mask first.

use serde_json::json;
use text::{Constraint, GrammarSpec};

use super::*;
use crate::tools::testing::{qwen, qwen_grammars};

fn tools() -> Vec<Tool> {
    vec![
        Tool {
            name: "get_weather".into(),
            description: Some("Weather of a city".into()),
            parameters: json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["C", "F"]},
                },
                "required": ["city"],
            }),
        },
        Tool {
            name: "search".into(),
            description: None,
            parameters: json!({
                "type": "object",
                "properties": {"filter": {"$ref": "#/$defs/filter"}},
                "required": ["filter"],
                "$defs": {"filter": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
            }),
        },
    ]
}

fn spec(choice: ToolChoice, parallel: bool) -> ToolSpec {
    ToolSpec {
        tools: tools(),
        choice,
        parallel,
    }
}

fn compile(format: ToolFormat, spec: &ToolSpec) -> Constraint {
    let g = lark(format, spec, &qwen().tok).expect("a grammar");
    qwen_grammars()
        .compile(&GrammarSpec::Lark(g.clone()))
        .unwrap_or_else(|e| panic!("{format} {:?}: {e}\n{g}", spec.choice))
}

/// `Ok` when every token of `text` is allowed in turn (and committed), else the index of the
/// first token the grammar forbids.
fn walk(c: &mut Constraint, text: &str) -> Result<(), usize> {
    let tok = &qwen().tok;
    let ids = tok.encode(text, false, false).unwrap();
    let mut logits = vec![0f32; tok.n_vocab()];
    for (i, &id) in ids.iter().enumerate() {
        logits.fill(0.0);
        c.mask(&mut logits).unwrap();
        if logits[id as usize] == f32::NEG_INFINITY {
            return Err(i);
        }
        c.commit(id).unwrap();
    }
    Ok(())
}

fn may_end(c: &mut Constraint) -> bool {
    let tok = &qwen().tok;
    let mut logits = vec![0f32; tok.n_vocab()];
    c.mask(&mut logits).unwrap();
    tok.eog_ids()
        .iter()
        .any(|&e| logits[e as usize].is_finite())
}

fn accepted(format: ToolFormat, spec: &ToolSpec, text: &str) {
    let mut c = compile(format, spec);
    let walked = walk(&mut c, text);
    assert_eq!(
        walked,
        Ok(()),
        "{format} {:?} refused {text:?}",
        spec.choice
    );
    assert!(
        may_end(&mut c),
        "{format} {:?}: cannot end after {text:?}",
        spec.choice
    );
}

/// Checks that some token of `text` is forbidden (not merely that the text is unfinished).
fn refused(format: ToolFormat, spec: &ToolSpec, text: &str) {
    let mut c = compile(format, spec);
    let at = walk(&mut c, text).expect_err(&format!("{format} {:?} took {text:?}", spec.choice));
    let ids = qwen().tok.encode(text, false, false).unwrap();
    eprintln!(
        "{format} {:?}: {text:?} refused at {:?}",
        spec.choice,
        qwen().tok.decode(&ids[at..=at])
    );
}

const FORMATS: [ToolFormat; 6] = [
    ToolFormat::Hermes,
    ToolFormat::Llama3,
    ToolFormat::Mistral,
    ToolFormat::Generic,
    ToolFormat::Dsml,
    ToolFormat::QwenXml,
];

#[test]
fn every_choice_compiles_or_is_unconstrained() {
    let named = ToolChoice::Named("search".into());
    for format in FORMATS {
        for choice in [ToolChoice::Auto, ToolChoice::Required, named.clone()] {
            for parallel in [true, false] {
                let s = spec(choice.clone(), parallel);
                match lark(format, &s, &qwen().tok) {
                    None => assert_eq!((format, &choice), (ToolFormat::Llama3, &ToolChoice::Auto)),
                    Some(_) => drop(compile(format, &s)),
                }
            }
        }
        assert_eq!(
            lark(format, &spec(ToolChoice::None, true), &qwen().tok),
            None
        );
    }
}

#[test]
fn required_accepts_the_written_calls() {
    let paris = json!({"city": "Paris", "unit": "C"});
    let filter = json!({"filter": {"q": "rust"}});
    let both = [("get_weather", &paris), ("search", &filter)];
    for format in FORMATS {
        let one = format.write_calls(&both[..1]);
        accepted(format, &spec(ToolChoice::Required, false), &one);
        refused(
            format,
            &spec(ToolChoice::Required, false),
            &format.write_calls(&both),
        );
        if format != ToolFormat::Llama3 {
            accepted(
                format,
                &spec(ToolChoice::Required, true),
                &format.write_calls(&both),
            );
        }
        accepted(
            format,
            &spec(ToolChoice::Named("search".into()), true),
            &format.write_calls(&both[1..]),
        );
        refused(
            format,
            &spec(ToolChoice::Named("search".into()), true),
            &one,
        );
    }
}

#[test]
fn required_refuses_bad_calls() {
    let s = spec(ToolChoice::Required, true);
    let empty = json!({});
    let paris = json!({"city": "Paris"});
    let bad_unit = json!({"city": "Paris", "unit": "K"});
    for format in FORMATS {
        for (name, args) in [
            ("get_wether", &paris),
            ("get_weather", &empty),
            ("get_weather", &bad_unit),
            ("search", &paris),
        ] {
            refused(format, &s, &format.write_calls(&[(name, args)]));
        }
        refused(format, &s, "Sure! Let me look.");
    }
}

#[test]
fn auto_is_lazy_until_the_marker() {
    let s = spec(ToolChoice::Auto, true);
    let paris = json!({"city": "Paris"});
    let marked = [
        ToolFormat::Hermes,
        ToolFormat::Mistral,
        ToolFormat::Dsml,
        ToolFormat::QwenXml,
    ];
    for format in marked {
        accepted(format, &s, "It is probably sunny, but I cannot know.");
        let call = format.write_calls(&[("get_weather", &paris)]);
        accepted(format, &s, &format!("Let me check.\n{call}"));
        let nope = format.write_calls(&[("nope", &paris)]);
        refused(format, &s, &format!("Let me check.\n{nope}"));
    }
    let generic = ToolFormat::Generic;
    accepted(generic, &s, r#"{"response": "Hello there"}"#);
    accepted(
        generic,
        &s,
        &generic.write_calls(&[("get_weather", &paris)]),
    );
    refused(generic, &s, "Hello there");
}

#[test]
fn hermes_auto_takes_a_bare_call_and_constrains_it() {
    let s = spec(ToolChoice::Auto, true);
    let paris = json!({"city": "Paris"});
    accepted(
        ToolFormat::Hermes,
        &s,
        r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#,
    );
    refused(
        ToolFormat::Hermes,
        &s,
        r#"{"name": "nope", "arguments": {"city": "Paris"}}"#,
    );
    refused(
        ToolFormat::Hermes,
        &s,
        r#"{"name": "get_weather", "arguments": {}}"#,
    );
    let call = ToolFormat::Hermes.write_calls(&[("get_weather", &paris)]);
    accepted(ToolFormat::Hermes, &s, &format!("{call}\n{call}"));
    let fenced = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
    accepted(ToolFormat::Hermes, &s, fenced);
    refused(
        ToolFormat::Hermes,
        &s,
        &fenced.replace("get_weather", "nope"),
    );
    accepted(ToolFormat::Hermes, &s, "```python\nprint(1)\n```");
}

#[test]
fn auto_without_parallel_allows_one_call() {
    let s = spec(ToolChoice::Auto, false);
    let paris = json!({"city": "Paris"});
    let call = ToolFormat::Hermes.write_calls(&[("get_weather", &paris)]);
    accepted(ToolFormat::Hermes, &s, &format!("Checking.\n{call}"));
    refused(ToolFormat::Hermes, &s, &format!("{call}\n{call}"));
}

/// DSML parameters as each tool's schema declares them: text where it allows a string (one
/// of its `enum`), JSON where it allows anything else; required ones first, then optional
/// ones in any order; a tool without parameters writes its empty line.
#[test]
fn dsml_parameters_follow_the_schema() {
    let mut tools = tools();
    tools[0].parameters = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "unit": {"enum": ["C", "F"]},
            "note": {"type": ["string", "null"]},
        },
        "required": ["city", "days"],
    });
    tools.push(Tool {
        name: "now".into(),
        description: None,
        parameters: json!({"type": "object", "properties": {}}),
    });
    tools.push(Tool {
        name: "any".into(),
        description: None,
        parameters: json!({"type": "object"}),
    });
    let s = ToolSpec {
        tools,
        choice: ToolChoice::Required,
        parallel: true,
    };
    let dsml = ToolFormat::Dsml;
    let p = |k: &str, as_text: bool, v: &str| {
        format!("<｜DSML｜parameter name=\"{k}\" string=\"{as_text}\">{v}</｜DSML｜parameter>\n")
    };
    let block = |name: &str, params: &str| {
        let params = if params.is_empty() { "\n" } else { params };
        format!("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"{name}\">\n{params}</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
    };
    let city = p("city", true, "São Paulo, \"SP\" <b>");
    let days = p("days", false, "3");
    for params in [
        format!("{city}{days}"),
        format!(
            "{city}{days}{}{}",
            p("note", false, "null"),
            p("unit", true, "F")
        ),
        format!("{city}{days}{}", p("note", true, "bring </b> an umbrella")),
    ] {
        accepted(dsml, &s, &block("get_weather", &params));
    }
    for params in [
        format!("{days}{city}"),
        city.clone(),
        format!("{}{days}", p("city", false, "\"Paris\"")),
        format!("{city}{}", p("days", true, "3")),
        format!("{city}{}", p("days", false, "3.5")),
        format!("{city}{days}{}", p("unit", true, "K")),
        format!("{city}{days}{}", p("wind", true, "yes")),
    ] {
        refused(dsml, &s, &block("get_weather", &params));
    }
    accepted(dsml, &s, &block("now", ""));
    refused(dsml, &s, &block("now", &p("x", true, "1")));
    accepted(dsml, &s, &block("any", ""));
    accepted(
        dsml,
        &s,
        &block(
            "any",
            &format!(
                "{}{}",
                p("x", true, "1"),
                p("y", false, "[1, {\"a\": null}]")
            ),
        ),
    );
}

/// Qwen3-Coder's values as each tool's schema declares them: text where it allows a string
/// (one of its `enum`), JSON where it allows anything else; required ones first.
#[test]
fn qwen_xml_parameters_follow_the_schema() {
    let mut tools = tools();
    tools[0].parameters = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "unit": {"enum": ["C", "F"]},
        },
        "required": ["city", "days"],
    });
    let s = ToolSpec {
        tools,
        choice: ToolChoice::Required,
        parallel: false,
    };
    let xml = ToolFormat::QwenXml;
    let p = |k: &str, v: &str| format!("<parameter={k}>\n{v}\n</parameter>\n");
    let call = |params: &str| {
        format!("<tool_call>\n<function=get_weather>\n{params}</function>\n</tool_call>")
    };
    let (city, days) = (p("city", "São Paulo, <b>\nline two"), p("days", "3"));
    accepted(xml, &s, &call(&format!("{city}{days}")));
    accepted(xml, &s, &call(&format!("{city}{days}{}", p("unit", "F"))));
    for params in [
        format!("{days}{city}"),
        city.clone(),
        format!("{city}{}", p("days", "three")),
        format!("{city}{days}{}", p("unit", "K")),
        format!("{city}{days}{}", p("wind", "yes")),
    ] {
        refused(xml, &s, &call(&params));
    }
}

#[test]
fn markers_use_control_tokens_when_the_vocabulary_has_them() {
    let tok = &qwen().tok;
    assert_eq!(literal(tok, "<tool_call>"), "\"<tool_call>\"");
    assert_eq!(literal(tok, "<|im_end|>"), "<[151645]>");
    assert_eq!(lazy_head(tok, "<|im_end|>"), "head: TEXT <[151645]>");
}
