//! What every benchmark prints: Markdown tables, ratios, percentiles, and the versioned
//! JSON document they write.

use serde::Serialize;

/// A Markdown table: a header row and rows of cells, each row as long as the header.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: ToString>(header: &[S]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are left empty.
    pub fn row<S: ToString>(&mut self, cells: &[S]) {
        let mut row: Vec<String> = cells.iter().map(|c| c.to_string()).collect();
        row.resize(self.header.len().max(row.len()), String::new());
        self.rows.push(row);
    }

    /// `| a | b |` lines with a `|---|` rule under the header, newline-terminated.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = line(&self.header);
        out += &format!("|{}\n", "---|".repeat(self.header.len()));
        for r in &self.rows {
            out += &line(r);
        }
        out
    }
}

/// `a / b` as `1.23×`, or `-` when there is no `b`.
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "-".into()
    }
}

/// The `q`-quantile (0..=1) of `values` by the nearest-rank method; `None` when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The mean of `values`; `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// A figure with `digits` decimals, `-` when there is none.
pub fn fixed(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The JSON document a benchmark writes: its kind and format version first, then its
/// own fields.
#[derive(Debug, Serialize)]
pub struct Document<T: Serialize> {
    pub kind: &'static str,
    pub version: u32,
    pub machine: crate::Machine,
    #[serde(flatten)]
    pub body: T,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_renders_markdown_with_a_rule() {
        let mut t = Table::new(&["measure", "a"]);
        t.row(&["tok/s", "1.5"]);
        t.row(&["only"]);
        assert_eq!(
            t.markdown(),
            "| measure | a |\n|---|---|\n| tok/s | 1.5 |\n| only |  |\n"
        );
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.9), Some(90.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.0), Some(1.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(mean(&[1.0, 2.0]), Some(1.5));
    }
}
