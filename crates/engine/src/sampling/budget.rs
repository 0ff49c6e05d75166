//! A reasoning budget (llama-server's `--reasoning-budget`, Anthropic's
//! `thinking.budget_tokens`): once reasoning has opened, at most so many tokens of it are
//! generated; then the end of reasoning (an optional message, then the closing tag) is forced
//! token by token, and the answer goes on as usual.

/// What a request's reasoning budget is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkBudget {
    /// Reasoning tokens allowed before the end is forced (0: the end at once).
    pub tokens: usize,
    /// The tokens that open and close reasoning (`<think>`, `</think>`).
    pub start: Vec<u32>,
    pub end: Vec<u32>,
    /// What is forced when the budget is spent (a message, then `end`).
    pub forced: Vec<u32>,
    /// The prompt already opened reasoning (it ends with `start`).
    pub inside: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reasoning has not opened.
    Before,
    /// Reasoning tokens generated so far.
    Counting(usize),
    /// The next token is `forced[i]`.
    Forcing(usize),
    Done,
}

/// A budget as a sequence spends it.
#[derive(Debug, Clone)]
pub struct Budget {
    spec: ThinkBudget,
    state: State,
    /// The last tokens emitted (as many as the longer tag).
    recent: Vec<u32>,
}

impl Budget {
    pub fn new(spec: ThinkBudget) -> Budget {
        let mut b = Budget {
            state: State::Before,
            recent: Vec::new(),
            spec,
        };
        if b.spec.inside {
            b.open();
        }
        b
    }

    fn open(&mut self) {
        self.state = match self.spec.tokens {
            0 if !self.spec.forced.is_empty() => State::Forcing(0),
            0 => State::Done,
            _ => State::Counting(0),
        };
    }

    /// The token the next row must be, while the budget forces the end.
    pub fn forced(&self) -> Option<u32> {
        match self.state {
            State::Forcing(i) => self.spec.forced.get(i).copied(),
            _ => None,
        }
    }

    /// Advances past the emitted token `id`.
    pub fn commit(&mut self, id: u32) {
        let keep = self.spec.start.len().max(self.spec.end.len()).max(1);
        self.recent.push(id);
        if self.recent.len() > keep {
            self.recent.remove(0);
        }
        self.state = match self.state {
            State::Before if self.recent.ends_with(&self.spec.start) => {
                self.open();
                return;
            }
            State::Counting(_) if self.recent.ends_with(&self.spec.end) => State::Done,
            State::Counting(n) if n + 1 >= self.spec.tokens => State::Forcing(0),
            State::Counting(n) => State::Counting(n + 1),
            State::Forcing(i) if i + 1 >= self.spec.forced.len() => State::Done,
            State::Forcing(i) => State::Forcing(i + 1),
            other => other,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tokens: usize, inside: bool) -> ThinkBudget {
        ThinkBudget {
            tokens,
            start: vec![1, 2],
            end: vec![3, 4],
            forced: vec![9, 3, 4],
            inside,
        }
    }

    /// Feeds `ids`, each replaced by the forced token when there is one; returns what was
    /// emitted.
    fn run(b: &mut Budget, ids: &[u32]) -> Vec<u32> {
        ids.iter()
            .map(|&id| {
                let id = b.forced().unwrap_or(id);
                b.commit(id);
                id
            })
            .collect()
    }

    #[test]
    fn the_end_is_forced_after_the_budget_and_only_then() {
        let mut b = Budget::new(spec(3, false));
        assert_eq!(
            run(&mut b, &[5, 1, 2, 7, 7, 7, 7, 7, 7, 7]),
            [5, 1, 2, 7, 7, 7, 9, 3, 4, 7]
        );
        let mut b = Budget::new(spec(3, true));
        assert_eq!(
            run(&mut b, &[7, 3, 4, 7, 7]),
            [7, 3, 4, 7, 7],
            "closed within the budget"
        );
        let mut b = Budget::new(spec(0, true));
        assert_eq!(run(&mut b, &[7, 7, 7, 7]), [9, 3, 4, 7]);
        let mut b = Budget::new(spec(2, false));
        assert_eq!(run(&mut b, &[7, 7, 7]), [7, 7, 7], "reasoning never opened");
    }
}
