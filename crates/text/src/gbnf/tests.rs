use super::to_lark;

fn lark(src: &str) -> String {
    to_lark(src).unwrap_or_else(|e| panic!("{src:?}: {e}"))
}

fn err(src: &str) -> String {
    to_lark(src).expect_err(src).0
}

#[test]
fn prefix_free_regular_rules_become_terminals() {
    assert_eq!(
        lark(r#"root ::= "a"{5,5}"#),
        "start: ROOT\nROOT: \"a\"{5}\n"
    );
    assert_eq!(
        lark(r#"root ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ["nt/] )* "\"""#),
        "start: ROOT\n".to_owned()
            + r#"ROOT: "\"" (/[^"\\\x{7f}\x{0}-\x{1f}]/ | "\\" /["nt\/]/)* "\"""#
            + "\n"
    );
}

#[test]
fn greedy_pieces_and_recursion_stay_rules() {
    let src = r#"root ::= [0-9]+ "." [0-9]+ x
x ::= ("b" | "c"){2,}{,3} | . "q\x01\x7f\u00e9" | """#;
    let want = r#"start: root
root: ROOT_1 /[0-9]/+ x
ROOT_1: /[0-9]/+ "."
x: (X_1{2,}){0,3} | X_2 | ""
X_1: "b" | "c"
X_2: /(?s:.)/ "q\u0001\u007fé"
"#;
    assert_eq!(lark(src), want);
    let src = r#"# the example of the module's documentation
root ::= "[" ws (item ("," ws item)*)? "]"
item ::= "\"" [^"]* "\"" | [0-9]+ ws | root
ws   ::= [ \t\n]*
"#;
    let want = r#"start: root
root: "[" ws (item ("," ws item)*)? "]"
item: ITEM_1 | /[0-9]/+ ws | root
ITEM_1: "\"" /[^"]/* "\""
ws: /[ \t\n]/*
"#;
    assert_eq!(lark(src), want);
}

#[test]
fn layout_names_and_tokens() {
    let src = "root ::=\n  ( \"a\"\n  | \"b\" ) # c\n  | <[12]> !<[13]>* <|eot|>\n\n\
               x-Y ::= \"\" | x_y\nx_y ::= \"\"";
    let want = r#"start: root
root: ROOT_1 | <[12]> <[^13]>* <|eot|>
ROOT_1: "a" | "b"
x_y: "" | X_Y_1
X_Y_1: ""
"#;
    assert_eq!(lark(src), want);
    let src = "start ::= \"s\"\nroot ::= start 9a\n9a ::= \"n\"";
    assert_eq!(
        lark(src),
        "start: ROOT\nR_START: \"s\"\nROOT: R_START R_9A\nR_9A: \"n\"\n"
    );
    assert_eq!(
        lark("root ::= \"a\"{0} [^]"),
        "start: ROOT\nROOT: \"\" /(?s:.)/\n"
    );
}

/// One case a line: the grammar (`⏎` for a line break), ` → `, the error's place and text.
const ERRORS: &str = r#"
root ::= "a"⏎foo = "b" → 2, column 5: expected '::=', found '='
root ::= "a → 1, column 10: unterminated string literal (missing '"')
root ::= foo → 1, column 10: undefined rule 'foo'
root ::= ("a" → 1, column 14: expected ')', found end of input
root ::= "a" ) → 1, column 14: expected an item, '|' or end of line, found ')'
root ::= "a"⏎  "b" → 2, column 3: expected a rule name, found '"'
root ::= [z-a] → 1, column 11: reversed range 'z'-'a'
root ::= [] → 1, column 10: empty character class '[]' matches nothing
root ::= [a → 1, column 10: unterminated character class (missing ']')
root ::= "\q" → 1, column 11: unknown escape '\q'
root ::= "\x4" → 1, column 11: expected 2 hex digits after '\x'
root ::= "\uD800" → 1, column 11: '\uD800' is not a Unicode scalar value
root ::= * "a" → 1, column 10: repetition operator without an item
root ::= ({2} "a") → 1, column 11: repetition operator without an item
root ::= "a"{3,2} → 1, column 13: repetition minimum exceeds its maximum
root ::= "a"{9999999} → 1, column 14: repetition count above 100000
root ::= "a"{2 → 1, column 15: expected ',' or '}', found end of input
root ::= <a b> → 1, column 10: expected a token '<text>' or '<[id]>'
root ::= <[1a]> → 1, column 10: expected a token '<text>' or '<[id]>'
root ::= !<think> → 1, column 11: '!<think>' is not supported: write the token's id, '!<[id]>'
root ::= "a"⏎root ::= "b" → 2, column 1: rule 'root' is defined twice
"#;

#[test]
fn errors_name_the_place() {
    for case in ERRORS.lines().filter(|l| !l.is_empty()) {
        let (src, want) = case.split_once(" → ").expect("a case");
        let src = src.replace('⏎', "\n");
        assert_eq!(err(&src), format!("GBNF line {want}"), "{src:?}");
    }
    assert_eq!(
        err("a ::= \"x\""),
        "GBNF: no 'root' rule (the start rule) is defined"
    );
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(30), ")".repeat(30));
    assert!(err(&deep).contains("nested deeper"));
}

#[test]
fn no_prefix_of_a_grammar_panics() {
    let src = "root ::= (\"{\" ws [a-z\\-]+ \"\\u00e9\" <[5]> !<[6]>)* x{2,} # c\nx ::= [^\\x00] | \"q\"{,3}\nws ::= [ ]?\n";
    for (end, _) in src.char_indices() {
        let _ = to_lark(&src[..end]);
    }
    assert!(to_lark(src).is_ok());
}
