//! GBNF grammars compiled against SmolLM2's real vocabulary, checked by masking all-zero
//! logits: a deterministic walk (longest allowed token, then lowest id) and the tokens of
//! known strings.

mod common;

use std::sync::Arc;

use text::{Constraint, GrammarSpec, Grammars, Tokenizer};

const JSON: &str = r#"# Grammar for subset of JSON - doesn't support full string or number syntax

root  ::= object
value ::= object | array | string | number | boolean

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}"

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]"

string  ::=
  "\"" (
    [\x20\x21\x23-\x5b\x5d-\U0010FFFF] | # any code point except " (\x22) and \ (\x5c)
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]) # escapes
  )* "\""

# Only plain integers currently
number  ::= "-"? [0-9]+ ws
boolean ::= ("true" | "false") ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= ([ \t\n] ws)?
"#;

const LIST: &str = r#"root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
"#;

const ARITHMETIC: &str = r#"root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
"#;

struct Vocab {
    tok: Arc<Tokenizer>,
    grammars: Grammars,
}

fn vocab() -> Vocab {
    let file = common::open("smollm2-135m");
    let tok = Arc::new(Tokenizer::from_gguf(&file.header.metadata).expect("tokenizer"));
    let grammars = Grammars::new(tok.clone()).expect("grammars");
    Vocab { tok, grammars }
}

impl Vocab {
    fn compile(&self, gbnf: &str) -> Constraint {
        self.grammars
            .compile(&GrammarSpec::Gbnf(gbnf.to_owned()))
            .unwrap_or_else(|e| panic!("{gbnf}\n{e}"))
    }

    /// The ids `c` allows next.
    fn allowed(&self, c: &mut Constraint) -> Vec<u32> {
        let mut logits = vec![0.0f32; self.tok.n_vocab()];
        c.mask(&mut logits).expect("mask");
        (0..logits.len() as u32)
            .filter(|&id| logits[id as usize].is_finite())
            .collect()
    }

    /// Generates from `gbnf` for at most `steps` tokens, choosing the longest allowed piece
    /// (lowest id on ties) until only end of generation is allowed; `check` sees the text so
    /// far and the allowed ids at every step.
    fn walk(&self, gbnf: &str, steps: usize, mut check: impl FnMut(&str, &[u32])) -> String {
        let mut c = self.compile(gbnf);
        let mut ids = Vec::new();
        for _ in 0..steps {
            let allowed = self.allowed(&mut c);
            check(&self.tok.decode(&ids), &allowed);
            let best = allowed
                .iter()
                .filter(|&&id| !self.tok.is_eog(id))
                .max_by_key(|&&id| (self.tok.token_to_piece(id).len(), std::cmp::Reverse(id)));
            match best {
                Some(&id) if !c.is_finished() => {
                    c.commit(id).expect("commit");
                    ids.push(id);
                }
                _ => break,
            }
        }
        self.tok.decode(&ids)
    }

    /// Whether `text`, tokenized as the model would, is a complete sentence of `gbnf`.
    fn accepts(&self, gbnf: &str, text: &str) -> bool {
        let mut c = self.compile(gbnf);
        for id in self.tok.encode(text, false, false).expect("encode") {
            if !self.allowed(&mut c).contains(&id) {
                return false;
            }
            c.commit(id).expect("commit");
        }
        let allowed = self.allowed(&mut c);
        self.tok.eog_ids().iter().any(|id| allowed.contains(id))
    }
}

#[test]
fn bounded_repetition_yields_exactly_its_count() {
    let v = vocab();
    let g = r#"root ::= "a"{5,5}"#;
    let mut steps = 0;
    let out = v.walk(g, 20, |so_far, allowed| {
        steps += 1;
        assert!(!allowed.is_empty());
        for &id in allowed {
            let next = format!("{so_far}{}", v.tok.decode(&[id]));
            assert!(
                v.tok.is_eog(id) && so_far == "aaaaa" || "aaaaa".starts_with(&next),
                "after {so_far:?}, token {id} ({next:?}) was allowed"
            );
        }
    });
    assert_eq!(out, "aaaaa");
    assert!(
        steps >= 2,
        "the walk must end on a step allowing only end of generation"
    );
    assert!(v.accepts(g, "aaaaa"));
    assert!(!v.accepts(g, "aaaa"));
    assert!(!v.accepts(g, "aaaaaa"));
}

#[test]
fn llama_cpp_json_grammar() {
    let v = vocab();
    assert!(v.accepts(JSON, r#"{"a": [1, -2, {"b": true}], "c": "x\n\u00e9"}"#));
    assert!(v.accepts(JSON, "{}"));
    assert!(!v.accepts(JSON, r#"{"a" 1}"#));
    assert!(!v.accepts(JSON, "[1]"));
    let out = v.walk(JSON, 12, |_, allowed| assert!(!allowed.is_empty()));
    assert!(out.starts_with('{'), "{out:?}");
}

#[test]
fn llama_cpp_list_grammar() {
    let v = vocab();
    assert!(v.accepts(LIST, "- milk\n- eggs, 12\n"));
    assert!(!v.accepts(LIST, "- milk"));
    assert!(!v.accepts(LIST, "milk\n"));
    let out = v.walk(LIST, 8, |_, allowed| assert!(!allowed.is_empty()));
    assert!(out.starts_with("- "), "{out:?}");
}

#[test]
fn llama_cpp_arithmetic_grammar() {
    let v = vocab();
    assert!(v.accepts(ARITHMETIC, "x = 1\n"));
    assert!(v.accepts(ARITHMETIC, "(a+b) *c2 = 42\nx=y\n"));
    assert!(!v.accepts(ARITHMETIC, "x = = 1\n"));
}

#[test]
fn special_tokens_by_text_and_id() {
    let v = vocab();
    let start = v.tok.encode("<|im_start|>", false, true).expect("encode");
    assert_eq!(start.len(), 1);
    for g in [
        r#"root ::= <|im_start|> "a""#.to_owned(),
        format!(r#"root ::= <[{}]> "a""#, start[0]),
    ] {
        let mut first = None;
        let out = v.walk(&g, 5, |_, allowed| {
            first.get_or_insert_with(|| allowed.to_vec());
        });
        let first = first.expect("a first step");
        assert_eq!(first, start, "{g}");
        assert!(out.ends_with('a'), "{out:?}");
    }
    let err = v
        .grammars
        .compile(&GrammarSpec::Gbnf("root ::= <|nope|>".into()));
    assert!(err.is_err());
}

#[test]
fn unused_and_oddly_named_rules_compile() {
    let v = vocab();
    let g = r#"root ::= Start-x "/" [/\\\]]
Start-x ::= [0-9]{2}
unused ::= [0-9]+ ws | unused
ws ::= " "*"#;
    assert_eq!(v.walk(g, 10, |_, _| {}).len(), 4);
    assert!(v.accepts(g, "42/]"));
    assert!(v.accepts(g, "42/\\"));
}

#[test]
fn large_counts_compile_without_blowing_up() {
    let v = vocab();
    let g = "root ::= [a-z]{100000} (\"(\" x \")\"){2,70000}\nx ::= \"y\" | \"(\" x \")\"";
    let t = std::time::Instant::now();
    let mut c = v.compile(g);
    v.allowed(&mut c);
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

#[test]
fn bad_grammars_name_the_problem() {
    let v = vocab();
    let cases = [
        ("root ::= \"a", "unterminated string literal"),
        ("root ::= foo", "undefined rule 'foo'"),
        ("item ::= \"a\"", "no 'root' rule"),
        (
            "root ::= \"a\"\nfoo := \"b\"",
            "line 2, column 5: expected '::='",
        ),
    ];
    for (g, want) in cases {
        let err = v
            .grammars
            .compile(&GrammarSpec::Gbnf(g.into()))
            .expect_err(g);
        assert!(err.0.contains(want), "{g:?}: {err}");
    }
}
