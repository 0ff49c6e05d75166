//! GBNF text → [`Node`] trees, with errors naming the line and column.

use std::collections::HashMap;

use super::Node;
use crate::grammar::GrammarError;

/// Largest count accepted in `{m,n}`; bigger bounds are almost surely mistakes.
const MAX_REPEAT: u64 = 100_000;
/// Deepest nesting of groups and stacked postfix operators; llguidance's Lark parser
/// refuses 30 levels, and the output nests exactly as deep as the input.
const MAX_DEPTH: usize = 24;

#[derive(Default)]
pub(super) struct Parser {
    pub(super) src: Vec<char>,
    pub(super) pos: usize,
    pub(super) depth: usize,
    pub(super) ids: HashMap<String, usize>,
    pub(super) names: Vec<String>,
    /// Body of each rule by id, `None` while only referenced.
    pub(super) rules: Vec<Option<Node>>,
    pub(super) first_use: Vec<usize>,
    /// Rule ids in the order of their definitions.
    pub(super) order: Vec<usize>,
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl Parser {
    fn err(&self, at: usize, msg: impl std::fmt::Display) -> GrammarError {
        let before = &self.src[..at.min(self.src.len())];
        let line = 1 + before.iter().filter(|&&c| c == '\n').count();
        let col = 1 + before.iter().rev().take_while(|&&c| c != '\n').count();
        GrammarError(format!("GBNF line {line}, column {col}: {msg}"))
    }

    fn expected(&self, what: &str) -> GrammarError {
        let found = match self.peek() {
            None => "end of input".to_owned(),
            Some('\r' | '\n') => "end of line".to_owned(),
            Some(c) => format!("{c:?}"),
        };
        self.err(self.pos, format!("expected {what}, found {found}"))
    }

    fn peek(&self) -> Option<char> {
        self.src.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        self.pos += usize::from(hit);
        hit
    }

    /// Skips blanks and `#` comments, and line breaks too when `newlines`.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while !matches!(self.peek(), None | Some('\r' | '\n')) {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    /// Parses the whole source: the body of each rule, by id.
    pub(super) fn grammar(&mut self) -> Result<Vec<Node>, GrammarError> {
        self.skip_space(true);
        while self.peek().is_some() {
            self.rule()?;
        }
        if let Some(id) = self.rules.iter().position(Option::is_none) {
            let name = &self.names[id];
            return Err(self.err(self.first_use[id], format!("undefined rule '{name}'")));
        }
        if !self.ids.contains_key("root") {
            return Err(GrammarError(
                "GBNF: no 'root' rule (the start rule) is defined".into(),
            ));
        }
        Ok(self.rules.drain(..).flatten().collect())
    }

    fn name(&mut self) -> Result<usize, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.expected("a rule name"));
        }
        let name: String = self.src[start..self.pos].iter().collect();
        let next = self.names.len();
        let id = *self.ids.entry(name.clone()).or_insert(next);
        if id == next {
            self.names.push(name);
            self.rules.push(None);
            self.first_use.push(start);
        }
        Ok(id)
    }

    fn rule(&mut self) -> Result<(), GrammarError> {
        let start = self.pos;
        let id = self.name()?;
        self.skip_space(false);
        if !self.src[self.pos..].starts_with(&[':', ':', '=']) {
            return Err(self.expected("'::='"));
        }
        self.pos += 3;
        self.skip_space(true);
        let body = self.alternatives(false)?;
        if !matches!(self.peek(), None | Some('\r' | '\n')) {
            return Err(self.expected("an item, '|' or end of line"));
        }
        self.skip_space(true);
        if self.rules[id].is_some() {
            return Err(self.err(start, format!("rule '{}' is defined twice", self.names[id])));
        }
        self.rules[id] = Some(body);
        self.order.push(id);
        Ok(())
    }

    fn alternatives(&mut self, nested: bool) -> Result<Node, GrammarError> {
        let mut alts = vec![self.sequence(nested)?];
        loop {
            let save = self.pos;
            self.skip_space(true);
            if !self.eat('|') {
                self.pos = save;
                break;
            }
            self.skip_space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(if alts.len() == 1 {
            alts.remove(0)
        } else {
            Node::Alt(alts)
        })
    }

    /// Items up to `|`, `)`, anything unexpected, or (outside parentheses) the line's end.
    fn sequence(&mut self, nested: bool) -> Result<Node, GrammarError> {
        let mut items: Vec<Node> = Vec::new();
        let mut stacked = 0;
        while let Some(c) = self.peek() {
            let item = match c {
                '"' => self.literal()?,
                '[' => self.class()?,
                '(' => self.group()?,
                '.' => {
                    self.pos += 1;
                    Node::Any
                }
                '<' | '!' => self.token()?,
                '*' | '+' | '?' | '{' => {
                    let Some(last) = items.pop() else {
                        return Err(self.err(self.pos, "repetition operator without an item"));
                    };
                    stacked += 1;
                    if self.depth + stacked > MAX_DEPTH {
                        return Err(self.err(self.pos, "too many stacked repetition operators"));
                    }
                    let (min, max) = self.repetition()?;
                    items.push(Node::Rep(Box::new(last), min, max));
                    self.skip_space(nested);
                    continue;
                }
                c if is_word(c) => Node::Ref(self.name()?),
                _ => break,
            };
            stacked = 0;
            items.push(item);
            self.skip_space(nested);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Node::Seq(items)
        })
    }

    fn group(&mut self) -> Result<Node, GrammarError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(
                self.pos,
                format!("groups nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.pos += 1;
        self.skip_space(true);
        let body = self.alternatives(true)?;
        if !self.eat(')') {
            return Err(self.expected("')'"));
        }
        self.depth -= 1;
        Ok(body)
    }

    fn literal(&mut self) -> Result<Node, GrammarError> {
        let start = self.pos;
        self.pos += 1;
        let mut s = String::new();
        loop {
            match self.peek() {
                None => return Err(self.err(start, "unterminated string literal (missing '\"')")),
                Some('"') => break,
                Some(_) => s.push(self.char()?),
            }
        }
        self.pos += 1;
        Ok(Node::Lit(s))
    }

    fn class(&mut self) -> Result<Node, GrammarError> {
        let start = self.pos;
        self.pos += 1;
        let negated = self.eat('^');
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.err(start, "unterminated character class (missing ']')")),
                Some(']') => break,
                Some(_) => {}
            }
            let at = self.pos;
            let lo = self.char()?;
            let mut hi = lo;
            if self.peek() == Some('-') && !matches!(self.src.get(self.pos + 1), None | Some(']')) {
                self.pos += 1;
                hi = self.char()?;
                if hi < lo {
                    return Err(self.err(at, format!("reversed range {lo:?}-{hi:?}")));
                }
            }
            ranges.push((lo, hi));
        }
        self.pos += 1;
        if !negated && ranges.is_empty() {
            return Err(self.err(start, "empty character class '[]' matches nothing"));
        }
        Ok(Node::Class(negated, ranges))
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GrammarError> {
        let at = self.pos;
        let c = self.peek().ok_or_else(|| self.expected("a character"))?;
        self.pos += 1;
        if c != '\\' {
            return Ok(c);
        }
        let e = self
            .peek()
            .ok_or_else(|| self.expected("an escape after '\\'"))?;
        self.pos += 1;
        let digits = match e {
            'n' => return Ok('\n'),
            't' => return Ok('\t'),
            'r' => return Ok('\r'),
            '\\' | '"' | '[' | ']' | '-' => return Ok(e),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => return Err(self.err(at, format!("unknown escape '\\{e}'"))),
        };
        let hex: String = self.src.iter().skip(self.pos).take(digits).collect();
        if hex.len() != digits || !hex.chars().all(|h| h.is_ascii_hexdigit()) {
            return Err(self.err(at, format!("expected {digits} hex digits after '\\{e}'")));
        }
        self.pos += digits;
        u32::from_str_radix(&hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.err(at, format!("'\\{e}{hex}' is not a Unicode scalar value")))
    }

    /// `<[id]>`, `!<[id]>` or `<text>`, in Lark syntax.
    fn token(&mut self) -> Result<Node, GrammarError> {
        let (negated, start) = (self.eat('!'), self.pos);
        let end = self.src[start..]
            .iter()
            .position(|&c| c == '>' || c.is_whitespace());
        let inner: String = match end {
            Some(n) if n > 1 && self.src[start] == '<' && self.src[start + n] == '>' => {
                self.src[start + 1..start + n].iter().collect()
            }
            _ => return Err(self.err(start, "expected a token '<text>' or '<[id]>'")),
        };
        self.pos = start + inner.chars().count() + 2;
        let id = inner.strip_prefix('[').and_then(|s| s.strip_suffix(']'));
        let bad = || self.err(start, "expected a token '<text>' or '<[id]>'");
        match id {
            Some(id) if (1..=9).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(Node::Token(format!(
                    "<[{}{id}]>",
                    if negated { "^" } else { "" }
                )))
            }
            Some(_) => Err(bad()),
            None if inner.contains('<') => Err(bad()),
            None if negated => {
                let msg = format!("'!<{inner}>' is not supported: write the token's id, '!<[id]>'");
                Err(self.err(start, msg))
            }
            None => Ok(Node::Token(format!("<{inner}>"))),
        }
    }

    /// `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` or `{,n}`: the bounds.
    fn repetition(&mut self) -> Result<(u32, Option<u32>), GrammarError> {
        let start = self.pos;
        self.pos += 1;
        match self.src[start] {
            '*' => return Ok((0, None)),
            '+' => return Ok((1, None)),
            '?' => return Ok((0, Some(1))),
            _ => {}
        }
        let min = self.int()?;
        let comma = self.eat(',');
        let (min, max) = if comma {
            (min.unwrap_or(0), self.int()?)
        } else {
            let m = min.ok_or_else(|| self.expected("a number"))?;
            (m, Some(m))
        };
        if !self.eat('}') {
            return Err(self.expected(if comma { "'}'" } else { "',' or '}'" }));
        }
        if max.is_some_and(|max| max < min) {
            return Err(self.err(start, "repetition minimum exceeds its maximum"));
        }
        Ok((min, max))
    }

    /// A count between blanks, if there is one.
    fn int(&mut self) -> Result<Option<u32>, GrammarError> {
        self.skip_space(false);
        let start = self.pos;
        let mut n: u64 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            n = (n * 10 + u64::from(d)).min(MAX_REPEAT + 1);
            self.pos += 1;
        }
        if n > MAX_REPEAT {
            return Err(self.err(start, format!("repetition count above {MAX_REPEAT}")));
        }
        let end = self.pos;
        self.skip_space(false);
        Ok((end > start).then_some(n as u32))
    }
}
