use serde_json::json;

use super::*;

const FORMATS: [ToolFormat; 5] = [
    ToolFormat::Hermes,
    ToolFormat::Llama3,
    ToolFormat::Mistral,
    ToolFormat::Generic,
    ToolFormat::Dsml,
];

fn tools() -> Vec<Tool> {
    crate::tools::testing::untyped_tools(&["get_weather", "search"])
}

/// Pieces with adjacent text merged and ids blanked (ids are checked on their own).
fn merged(pieces: impl IntoIterator<Item = Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for p in pieces {
        match (out.last_mut(), p) {
            (_, Piece::Text(t)) if t.is_empty() => panic!("empty text piece"),
            (Some(Piece::Text(a)), Piece::Text(b)) => a.push_str(&b),
            (_, Piece::Call(c)) => out.push(Piece::Call(ToolCall {
                id: String::new(),
                ..c
            })),
            (_, p) => out.push(p),
        }
    }
    out
}

fn run(format: ToolFormat, deltas: &[&str]) -> Vec<Piece> {
    let mut p = CallParser::new(format, &tools(), 7);
    let mut all = Vec::new();
    for d in deltas {
        all.extend(p.push(d));
    }
    all.extend(p.finish());
    merged(all)
}

/// The pieces of `text` pushed whole, checked equal to every split in two at a char boundary
/// and to one char at a time.
fn parse_all_ways(format: ToolFormat, text: &str) -> Vec<Piece> {
    let whole = run(format, &[text]);
    for at in (0..=text.len()).filter(|&at| text.is_char_boundary(at)) {
        let (a, b) = text.split_at(at);
        assert_eq!(
            run(format, &[a, b]),
            whole,
            "{format}: split at {at} of {text:?}"
        );
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(
        run(format, &chars),
        whole,
        "{format}: char by char {text:?}"
    );
    whole
}

fn text(s: &str) -> Piece {
    Piece::Text(s.to_string())
}

fn call(index: usize, name: &str, arguments: &str) -> Piece {
    Piece::Call(ToolCall {
        index,
        id: String::new(),
        name: name.to_string(),
        arguments: arguments.to_string(),
    })
}

/// The module documentation's example.
#[test]
fn module_example() {
    let f = [Tool {
        name: "f".into(),
        description: None,
        parameters: json!({"type": "object"}),
    }];
    let mut p = CallParser::new(ToolFormat::Hermes, &f, 0);
    assert_eq!(p.push("Let me check.\n<tool_"), vec![text("Let me check.")]);
    assert_eq!(p.push("call>\n{\"name\": \"f\", "), vec![]);
    let got = p.push("\"arguments\": {}}\n</tool_call>");
    assert_eq!(merged(got), vec![call(0, "f", "{}")]);
    assert_eq!(p.push("\n"), vec![]);
    assert_eq!(p.finish(), vec![]);

    let mut p = CallParser::new(ToolFormat::Llama3, &f, 0);
    assert_eq!(p.push("{\"name\": \"f\","), vec![]);
    let got = p.push(" \"parameters\": {\"x\": 1}}");
    assert_eq!(merged(got), vec![call(0, "f", r#"{"x":1}"#)]);

    let mut p = CallParser::new(ToolFormat::Hermes, &f, 0);
    let bad = "<tool_call>{oops}</tool_call>";
    assert_eq!(p.push(bad), vec![text(bad)]);

    let mut p = CallParser::new(ToolFormat::Dsml, &f, 0);
    let got = p.push("Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n");
    assert_eq!(got, vec![text("Sure.")]);
    let got = p.push(
        "<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n",
    );
    assert_eq!(merged(got), vec![call(0, "f", r#"{"x":1}"#)]);
    assert_eq!(p.push("</｜DSML｜tool_calls>"), vec![]);
    assert_eq!(p.finish(), vec![]);
}

#[test]
fn hermes_calls_between_text() {
    let answer = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": \\\"é\\\"}\"}\n</tool_call>\n";
    assert_eq!(
        parse_all_ways(ToolFormat::Hermes, answer),
        vec![
            text("Let me check."),
            call(0, "get_weather", r#"{"city":"Paris"}"#),
            call(1, "search", r#"{"q":"é"}"#),
        ]
    );
    let unclosed = "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n";
    assert_eq!(
        parse_all_ways(ToolFormat::Hermes, unclosed),
        vec![call(0, "search", "{}")]
    );
}

#[test]
fn hermes_bare_and_fenced_calls_at_the_start() {
    let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    let want = vec![call(0, "get_weather", r#"{"city":"Paris"}"#)];
    assert_eq!(parse_all_ways(ToolFormat::Hermes, bare), want);
    let fenced = format!("```json\n{bare}\n```");
    assert_eq!(parse_all_ways(ToolFormat::Hermes, &fenced), want);
    assert_eq!(
        parse_all_ways(ToolFormat::Hermes, &format!("```\n{bare}\n```\n")),
        want
    );
    let unknown = fenced.replace("get_weather", "nope");
    assert_eq!(
        parse_all_ways(ToolFormat::Hermes, &unknown),
        vec![text(&unknown)]
    );
    let code = "```python\nprint(1)\n```";
    assert_eq!(parse_all_ways(ToolFormat::Hermes, code), vec![text(code)]);
}

#[test]
fn markers_are_held_until_decided() {
    let mut p = CallParser::new(ToolFormat::Hermes, &tools(), 1);
    assert_eq!(p.push("Hi <tool_"), vec![text("Hi")]);
    assert_eq!(p.push("cal"), vec![]);
    assert_eq!(p.push("l> is a tag"), vec![text(" <tool_call> is a tag")]);
    assert_eq!(p.finish(), vec![]);

    let mut p = CallParser::new(ToolFormat::Mistral, &tools(), 1);
    assert_eq!(p.push("[TOOL"), vec![]);
    assert_eq!(p.push("_CALLS][{\"name\": \"search\""), vec![]);
    let got = p.push(", \"arguments\": {\"q\": 1}}]");
    assert_eq!(merged(got), vec![call(0, "search", r#"{"q":1}"#)]);

    let mut p = CallParser::new(ToolFormat::Llama3, &tools(), 1);
    assert_eq!(p.push("  {\"name\": "), vec![]);
    assert_eq!(p.finish(), vec![text("  {\"name\": ")]);
}

#[test]
fn bad_calls_come_back_as_text() {
    let cases = [
        (ToolFormat::Hermes, "<tool_call>{oops}</tool_call> after"),
        (
            ToolFormat::Hermes,
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}}\n</tool_call>",
        ),
        (
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
        ),
        (ToolFormat::Hermes, "a <tool_call>{\"name\": \"f\""),
        (ToolFormat::Mistral, "[TOOL_CALLS][{\"name\": \"f\"}, 3]"),
        (ToolFormat::Mistral, "[TOOL_CALLS] and then some"),
        (
            ToolFormat::Llama3,
            "{\"name\": \"unknown\", \"parameters\": {}}",
        ),
        (ToolFormat::Llama3, "{\"a\": 1} is JSON"),
        (ToolFormat::Llama3, "<|python_tag|>print(1)"),
        (ToolFormat::Generic, "{\"answer\": 42}"),
        (ToolFormat::Generic, "{not json"),
        (ToolFormat::Generic, "  Plain text {\"tool_calls\": []}\n"),
    ];
    for (format, answer) in cases {
        assert_eq!(
            parse_all_ways(format, answer),
            vec![text(answer)],
            "{format}: {answer:?}"
        );
    }
}

#[test]
fn answers_without_calls_are_untouched() {
    let answer = "\n  Hello,\n\nworld  \n";
    for format in FORMATS {
        assert_eq!(parse_all_ways(format, answer), vec![text(answer)]);
    }
}

#[test]
fn llama3_bare_and_tagged() {
    let bare = "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
    assert_eq!(
        parse_all_ways(ToolFormat::Llama3, bare),
        vec![call(0, "get_weather", r#"{"city":"Oslo"}"#)]
    );
    let tagged = "Sure.<|python_tag|>{\"name\": \"x\", \"parameters\": {}}; {\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}\nDone.";
    assert_eq!(
        parse_all_ways(ToolFormat::Llama3, tagged),
        vec![
            text("Sure."),
            call(0, "x", "{}"),
            call(1, "search", r#"{"q":"a"}"#),
            text("Done."),
        ]
    );
}

#[test]
fn mistral_both_syntaxes() {
    let array = "[TOOL_CALLS] [{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}, \"id\": \"abcdefghi\"}, {\"name\": \"get_weather\", \"arguments\": {}}]";
    assert_eq!(
        parse_all_ways(ToolFormat::Mistral, array),
        vec![
            call(0, "search", r#"{"q":"a"}"#),
            call(1, "get_weather", "{}")
        ]
    );
    let named =
        "[TOOL_CALLS]search[ARGS]{\"q\": \"a\"}[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{}";
    assert_eq!(
        parse_all_ways(ToolFormat::Mistral, named),
        vec![
            call(0, "search", r#"{"q":"a"}"#),
            call(1, "get_weather", "{}")
        ]
    );
}

#[test]
fn generic_calls_and_responses() {
    let calls = " {\"tool_calls\": [{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}, \"id\": \"1\"}]}\n";
    assert_eq!(
        parse_all_ways(ToolFormat::Generic, calls),
        vec![call(0, "search", r#"{"q":"a"}"#)]
    );
    let one = "{\"tool_call\": {\"name\": \"search\", \"arguments\": {}}}";
    assert_eq!(
        parse_all_ways(ToolFormat::Generic, one),
        vec![call(0, "search", "{}")]
    );
    let response = "{\"response\": \"It is sunny.\\nBye\"}\n";
    assert_eq!(
        parse_all_ways(ToolFormat::Generic, response),
        vec![text("It is sunny.\nBye")]
    );
}

#[test]
fn written_calls_read_back() {
    let a = json!({"city": "Paris", "days": [1, 2]});
    let b = json!({});
    let calls = [("get_weather", &a), ("search", &b)];
    for format in FORMATS {
        let written = format.write_calls(&calls);
        let (content, got) = parse_whole(format, &tools(), 3, &written);
        assert_eq!(content, "", "{format}: {written}");
        let got: Vec<(&str, Value)> = got
            .iter()
            .map(|c| (c.name.as_str(), serde_json::from_str(&c.arguments).unwrap()))
            .collect();
        assert_eq!(got, vec![("get_weather", a.clone()), ("search", b.clone())]);
    }
}

#[test]
fn ids_are_unique_and_shaped() {
    let answer = "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
    let (_, first) = parse_whole(ToolFormat::Hermes, &tools(), 11, answer);
    let (_, again) = parse_whole(ToolFormat::Hermes, &tools(), 11, answer);
    let (_, other) = parse_whole(ToolFormat::Hermes, &tools(), 12, answer);
    assert_eq!(first, again);
    assert_ne!(first[0].id, first[1].id);
    assert_ne!(first[0].id, other[0].id);
    for c in &first {
        assert!(c.id.starts_with("call_") && c.id.len() == 21, "{}", c.id);
        assert!(c.id[5..].bytes().all(|b| b.is_ascii_alphanumeric()));
    }
    let (_, mistral) = parse_whole(
        ToolFormat::Mistral,
        &tools(),
        11,
        "[TOOL_CALLS][{\"name\": \"a\"}]",
    );
    assert_eq!(mistral[0].id.len(), 9);
    assert!(mistral[0].id.bytes().all(|b| b.is_ascii_alphanumeric()));
}

/// Random answers built from markers, calls, broken calls and text: pushing them in random
/// pieces gives what pushing them whole gives, and an answer without calls comes back as is.
#[test]
fn random_answers_split_anywhere() {
    const BITS: &[&str] = &[
        "Hi",
        " ",
        "\n",
        "é",
        "{",
        "}",
        "[",
        "]",
        ";",
        ", ",
        "search",
        "\"",
        "<tool_",
        "<tool_call>",
        "</tool_call>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "[CALL_ID]",
        "<|python_tag|>",
        "\"name\": ",
        "\"arguments\": {}",
        "{\"name\": \"search\", \"arguments\": {\"q\": 1}}",
        "{\"name\": \"get_weather\"}",
        "{\"tool_calls\": [",
        "{\"response\": \"ok\"}",
        "<｜DSML｜tool_calls>",
        "</｜DSML｜tool_calls>",
        "<｜DSML｜invoke name=\"search\">",
        "</｜DSML｜invoke>",
        "<｜DSML｜parameter name=\"q\" string=\"true\">",
        "<｜DSML｜parameter name=\"q\" string=\"false\">",
        "</｜DSML｜parameter>",
        "<｜DSML｜",
    ];
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: usize| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n as u64) as usize
    };
    for format in FORMATS {
        for _ in 0..300 {
            let answer: String = (0..1 + next(10)).map(|_| BITS[next(BITS.len())]).collect();
            let whole = run(format, &[&answer]);
            let calls = whole.iter().any(|p| matches!(p, Piece::Call(_)));
            let response = format == ToolFormat::Generic && answer.contains("\"response\"");
            if !calls && !response {
                assert_eq!(whole, vec![text(&answer)], "{format}");
            }
            let mut cuts: Vec<usize> = (0..next(6))
                .map(|_| next(answer.len() + 1))
                .filter(|&c| answer.is_char_boundary(c))
                .collect();
            cuts.sort_unstable();
            cuts.push(answer.len());
            let mut deltas = Vec::new();
            let mut from = 0;
            for c in cuts {
                deltas.push(&answer[from..c]);
                from = c;
            }
            assert_eq!(run(format, &deltas), whole, "{format}: {deltas:?}");
        }
    }
}

/// DeepSeek-V4's example from its template's tools header, filled in: a string and a
/// non-string parameter, a second invoke without parameters (the template's empty line).
const DSML_TWO: &str = "Let me check.\n\n<｜DSML｜tool_calls>\n\
    <｜DSML｜invoke name=\"get_weather\">\n\
    <｜DSML｜parameter name=\"city\" string=\"true\">Paris, \"France\" <b>é</b>\nline 2</｜DSML｜parameter>\n\
    <｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n\
    </｜DSML｜invoke>\n\
    <｜DSML｜invoke name=\"search\">\n\n</｜DSML｜invoke>\n\
    </｜DSML｜tool_calls>";

fn dsml_two_calls() -> Vec<Piece> {
    vec![
        call(
            0,
            "get_weather",
            r#"{"city":"Paris, \"France\" <b>é</b>\nline 2","days":[1,2]}"#,
        ),
        call(1, "search", "{}"),
    ]
}

#[test]
fn dsml_calls_as_the_template_writes_them() {
    let mut want = vec![text("Let me check.")];
    want.extend(dsml_two_calls());
    assert_eq!(parse_all_ways(ToolFormat::Dsml, DSML_TWO), want);
    let after = format!("{DSML_TWO}\nDone.");
    want.push(text("Done."));
    assert_eq!(parse_all_ways(ToolFormat::Dsml, &after), want);
}

#[test]
fn dsml_values_by_their_string_attribute() {
    let values = [
        (r#"string="true">42"#, r#"{"v":"42"}"#),
        (r#"string="false">42"#, r#"{"v":42}"#),
        (r#"string="false"> true "#, r#"{"v":true}"#),
        (r#"string="false">null"#, r#"{"v":null}"#),
        (r#"string="false">"quoted""#, r#"{"v":"quoted"}"#),
        (
            r#"string="false">{"a": [1, {"b": "</x>"}]}"#,
            r#"{"v":{"a":[1,{"b":"</x>"}]}}"#,
        ),
        (r#"string="true">"#, r#"{"v":""}"#),
    ];
    for (param, args) in values {
        let answer = format!(
            "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"v\" {param}</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>"
        );
        assert_eq!(
            parse_all_ways(ToolFormat::Dsml, &answer),
            vec![call(0, "f", args)],
            "{param}"
        );
    }
}

#[test]
fn dsml_markers_are_held_until_decided() {
    let mut p = CallParser::new(ToolFormat::Dsml, &tools(), 1);
    assert_eq!(p.push("Hi\n\n<｜DSML｜tool"), vec![text("Hi")]);
    assert_eq!(p.push("_calls>\n<｜DSML｜invoke name=\"sea"), vec![]);
    assert_eq!(p.push("rch\">\n\n</｜DSML｜inv"), vec![]);
    assert_eq!(merged(p.push("oke>\n")), vec![call(0, "search", "{}")]);
    assert_eq!(p.push("</｜DSML｜tool_calls>"), vec![]);
    assert_eq!(p.finish(), vec![]);

    let mut p = CallParser::new(ToolFormat::Dsml, &tools(), 1);
    assert_eq!(p.push("a <｜DSML｜"), vec![text("a")]);
    assert_eq!(p.push("x"), vec![text(" <｜DSML｜x")]);
}

/// A block cut off at the end of the answer: complete invokes are calls (a missing or
/// partial closing tag is forgiven, as Hermes forgives its own), an unfinished invoke is text.
#[test]
fn dsml_unfinished_blocks() {
    let cut = DSML_TWO.find("</｜DSML｜tool_calls>").unwrap();
    for end in [cut, cut + 5, DSML_TWO.len() - 1] {
        let mut want = vec![text("Let me check.")];
        want.extend(dsml_two_calls());
        assert_eq!(
            parse_all_ways(ToolFormat::Dsml, &DSML_TWO[..end]),
            want,
            "{end}"
        );
    }
    let second = DSML_TWO.find("<｜DSML｜invoke name=\"search").unwrap();
    let mut want = vec![text("Let me check.")];
    want.extend(dsml_two_calls().into_iter().take(1));
    want.push(text("<｜DSML｜invoke name=\"search\">"));
    assert_eq!(
        parse_all_ways(ToolFormat::Dsml, &DSML_TWO[..second + 32]),
        want
    );
    let first = DSML_TWO.find("</｜DSML｜invoke>").unwrap();
    assert_eq!(
        parse_all_ways(ToolFormat::Dsml, &DSML_TWO[..first]),
        vec![text(&DSML_TWO[..first])]
    );
}

/// Broken calls stay in the content, marker and all: no call, so the answer's finish reason
/// is the engine's, never `tool_calls`.
#[test]
fn dsml_broken_calls_come_back_as_text() {
    let invoke = |body: &str| {
        format!("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n{body}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
    };
    let cases = [
        invoke("<｜DSML｜parameter name=\"x\" string=\"false\">{oops</｜DSML｜parameter>"),
        invoke("<｜DSML｜parameter name=\"x\" string=\"false\">Paris</｜DSML｜parameter>"),
        invoke("<｜DSML｜parameter name=\"x\" string=\"maybe\">1</｜DSML｜parameter>"),
        invoke("<｜DSML｜parameter name=\"x\">1</｜DSML｜parameter>"),
        invoke("<｜DSML｜parameter name=\"\" string=\"true\">1</｜DSML｜parameter>"),
        invoke("{\"x\": 1}"),
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>".into(),
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\n\">\n</｜DSML｜invoke>".into(),
        "<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>".into(),
        "Here: <｜DSML｜tool_calls> is how calls start.".into(),
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" string=\"true\">cut".into(),
    ];
    for answer in cases {
        assert_eq!(
            parse_all_ways(ToolFormat::Dsml, &answer),
            vec![text(&answer)],
            "{answer:?}"
        );
    }
}
