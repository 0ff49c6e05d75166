//! Needles in a haystack: a sentence naming a key and a seven-digit number, put at a depth
//! of filler text of a given length, then a question asking for the number of that key.
//! The same cases go to every server; an answer recalls the needle when one of its digit
//! runs is the number.

use serde::Serialize;

/// The cells to build: every length × depth, `per_cell` needles each.
#[derive(Debug, Clone)]
pub struct NeedleConfig {
    /// Tokens of the user message (filler, needle and question), before the chat template.
    pub lengths: Vec<usize>,
    /// Where the needle goes, in percent of the filler before it (0: first, 100: last).
    pub depths: Vec<u32>,
    pub per_cell: usize,
    pub seed: u64,
}

/// One question: the message a server is sent and the number its answer must hold.
#[derive(Debug, Clone, Serialize)]
pub struct NeedleCase {
    pub length: usize,
    pub depth: u32,
    pub key: String,
    pub secret: String,
    /// Tokens of `message` by the model's tokenizer.
    pub tokens: usize,
    #[serde(skip)]
    pub message: String,
}

const KEYS: [&str; 16] = [
    "Lisbon", "Nairobi", "Osaka", "Quito", "Tallinn", "Windhoek", "Hobart", "Bergen", "Cusco",
    "Dakar", "Fresno", "Gdansk", "Ibiza", "Jaipur", "Kumasi", "Luxor",
];

/// The needle sentence for a key and its number.
pub fn needle_sentence(key: &str, secret: &str) -> String {
    format!("The special magic number for {key} is {secret}.\n")
}

/// The question after the filler.
pub fn question(key: &str) -> String {
    format!(
        "\nWhat is the special magic number for {key} mentioned in the text above? \
         Answer with the number only."
    )
}

/// splitmix64: the cases' numbers, the same for every server and run with one seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The haystack's lines with their token counts; filler is whole lines, cycled.
struct Filler {
    lines: Vec<(String, usize)>,
}

impl Filler {
    fn new(haystack: &str, count: &dyn Fn(&str) -> usize) -> Result<Filler, String> {
        let lines: Vec<(String, usize)> = haystack
            .split_inclusive('\n')
            .filter(|l| !l.trim().is_empty())
            .map(|l| (l.to_string(), count(l)))
            .filter(|(_, n)| *n > 0)
            .collect();
        match lines.is_empty() {
            true => Err("the haystack text has no lines".into()),
            false => Ok(Filler { lines }),
        }
    }

    /// The first lines of the cycle whose counts add up to at least `tokens`.
    fn take(&self, tokens: usize) -> Vec<&(String, usize)> {
        let mut out = Vec::new();
        let mut sum = 0;
        for line in self.lines.iter().cycle() {
            if sum >= tokens {
                break;
            }
            sum += line.1;
            out.push(line);
        }
        out
    }
}

/// `lines` with the needle before the first line at which `depth`% of their tokens (by
/// per-line counts) have been passed, then the question.
fn assemble(lines: &[&(String, usize)], depth: u32, needle: &str, ask: &str) -> String {
    let total: usize = lines.iter().map(|l| l.1).sum();
    let at = depth as usize * total / 100;
    let mut message = String::new();
    let mut passed = 0;
    let mut placed = false;
    for line in lines {
        if !placed && passed >= at {
            message += needle;
            placed = true;
        }
        message += &line.0;
        passed += line.1;
    }
    if !placed {
        message += needle;
    }
    message + ask
}

/// Every case of `cfg`, lengths and depths in the order given. The filler of every case is a
/// prefix of the same cycle of `haystack`'s lines, one filler per length (lines are added
/// until the whole message, counted at once, reaches the length; a case's own key and
/// number may take a few tokens more or fewer), so cases at one length differ only from
/// their needle on. Fails when a length leaves no room for filler.
pub fn needle_cases(
    haystack: &str,
    count: &dyn Fn(&str) -> usize,
    cfg: &NeedleConfig,
) -> Result<Vec<NeedleCase>, String> {
    if let Some(d) = cfg.depths.iter().find(|d| **d > 100) {
        return Err(format!("depth {d}% is past the end (0..=100)"));
    }
    let filler = Filler::new(haystack, count)?;
    let mut cases = Vec::new();
    for &length in &cfg.lengths {
        let probe = (needle_sentence(KEYS[0], "1234567"), question(KEYS[0]));
        let fixed = count(&probe.0) + count(&probe.1);
        let mut room = length.checked_sub(fixed).filter(|r| *r > 0).ok_or_else(|| {
            format!("a length of {length} tokens leaves no room for filler ({fixed} for needle and question)")
        })?;
        for _ in 0..4 {
            let n = count(&assemble(&filler.take(room), 50, &probe.0, &probe.1));
            if n >= length {
                break;
            }
            room += length - n;
        }
        let lines = filler.take(room);
        for &depth in &cfg.depths {
            for _ in 0..cfg.per_cell {
                let n = cases.len() as u64;
                let key = KEYS[(mix(cfg.seed ^ (n << 1)) % KEYS.len() as u64) as usize];
                let secret = (1_000_000 + mix(cfg.seed ^ (n << 1 | 1)) % 9_000_000).to_string();
                let message = assemble(
                    &lines,
                    depth,
                    &needle_sentence(key, &secret),
                    &question(key),
                );
                cases.push(NeedleCase {
                    length,
                    depth,
                    key: key.to_string(),
                    secret,
                    tokens: count(&message),
                    message,
                });
            }
        }
    }
    Ok(cases)
}

/// Whether one of `answer`'s runs of digits (commas and spaces between digits removed) is
/// `secret`.
pub fn recalled(answer: &str, secret: &str) -> bool {
    let chars: Vec<char> = answer.chars().collect();
    let mut runs = vec![String::new()];
    for (i, &c) in chars.iter().enumerate() {
        let between_digits = |i: usize| {
            i > 0
                && chars[i - 1].is_ascii_digit()
                && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit())
        };
        if c.is_ascii_digit() {
            runs.last_mut().expect("one run").push(c);
        } else if !((c == ',' || c == ' ') && between_digits(i)) {
            runs.push(String::new());
        }
    }
    runs.iter().any(|r| r == secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    fn cfg(lengths: &[usize], depths: &[u32]) -> NeedleConfig {
        NeedleConfig {
            lengths: lengths.to_vec(),
            depths: depths.to_vec(),
            per_cell: 2,
            seed: 7,
        }
    }

    const HAY: &str = "one two three four\nfive six seven eight\nnine ten eleven twelve\n";

    #[test]
    fn the_needle_sits_at_its_depth_and_the_length_holds() {
        let cases = needle_cases(HAY, &words, &cfg(&[200], &[0, 50, 100])).unwrap();
        assert_eq!(cases.len(), 6);
        for c in &cases {
            let needle = needle_sentence(&c.key, &c.secret);
            let at = c
                .message
                .find(&needle)
                .expect("the needle is in the message");
            let before = words(&c.message[..at]);
            let filler = c.tokens - words(&needle) - words(&question(&c.key));
            let want = c.depth as usize * filler / 100;
            assert!(
                before.abs_diff(want) <= 4,
                "depth {}: {before} words before, want {want}",
                c.depth
            );
            assert!(c.tokens >= 200 && c.tokens <= 205, "{} words", c.tokens);
            assert!(c.message.ends_with(&question(&c.key)));
        }
        assert!(cases[0]
            .message
            .starts_with(&needle_sentence(&cases[0].key, &cases[0].secret)));
    }

    #[test]
    fn cases_are_the_same_for_one_seed_and_differ_between_needles() {
        let a = needle_cases(HAY, &words, &cfg(&[64, 128], &[25])).unwrap();
        let b = needle_cases(HAY, &words, &cfg(&[64, 128], &[25])).unwrap();
        assert_eq!(
            a.iter().map(|c| &c.message).collect::<Vec<_>>(),
            b.iter().map(|c| &c.message).collect::<Vec<_>>()
        );
        assert_ne!(a[0].secret, a[1].secret);
        assert!(a.iter().all(|c| c.secret.len() == 7));
    }

    #[test]
    fn too_short_a_length_or_too_deep_a_depth_is_an_error() {
        assert!(needle_cases(HAY, &words, &cfg(&[10], &[0])).is_err());
        assert!(needle_cases(HAY, &words, &cfg(&[100], &[101])).is_err());
        assert!(needle_cases("\n\n", &words, &cfg(&[100], &[0])).is_err());
    }

    #[test]
    fn an_answer_recalls_only_the_whole_number() {
        assert!(recalled("The number is 4821937.", "4821937"));
        assert!(recalled("4,821,937", "4821937"));
        assert!(recalled("4 821 937", "4821937"));
        assert!(!recalled("482193", "4821937"));
        assert!(!recalled("48219370", "4821937"));
        assert!(!recalled("4821936 or so", "4821937"));
        assert!(!recalled("", "4821937"));
    }
}
