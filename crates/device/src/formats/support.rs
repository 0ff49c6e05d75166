//! The support matrix: every registered weight type and how each backend runs it, so a
//! type one backend runs and another refuses shows as a gap in one table.

use std::fmt;

use gguf::GgmlType;

use super::{format, FORMATS};

/// How a backend runs `ty`: a short name of the form its kernels read (e.g. "int8
/// packed"), `None` where it refuses the type at load. Each backend derives its own from
/// its per-type table.
pub type FormOf = fn(GgmlType) -> Option<&'static str>;

/// The reference backend's form: every registered type, dequantized to f32.
pub fn reference_form(ty: GgmlType) -> Option<&'static str> {
    format(ty).map(|_| "f32")
}

/// Every registered type (in [`FORMATS`] order) against named backends; its `Display`
/// is a table with `-` where a backend refuses the type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportMatrix {
    /// The backends' names, one per column after the type.
    pub backends: Vec<&'static str>,
    /// `(type, whether tandem writes it, one form per backend)`.
    pub rows: Vec<(GgmlType, bool, Vec<Option<&'static str>>)>,
}

/// The matrix of the registered types against `backends` (name, form), the reference
/// first among them by convention.
pub fn support_matrix(backends: &[(&'static str, FormOf)]) -> SupportMatrix {
    SupportMatrix {
        backends: backends.iter().map(|b| b.0).collect(),
        rows: FORMATS
            .iter()
            .map(|f| {
                let forms = backends.iter().map(|b| (b.1)(f.ty)).collect();
                (f.ty, f.quantize.is_some(), forms)
            })
            .collect(),
    }
}

impl SupportMatrix {
    /// The types `backend` refuses though the registry reads them.
    pub fn gaps(&self, backend: &str) -> Vec<GgmlType> {
        let Some(col) = self.backends.iter().position(|&b| b == backend) else {
            return Vec::new();
        };
        self.rows
            .iter()
            .filter(|r| r.2[col].is_none())
            .map(|r| r.0)
            .collect()
    }
}

impl fmt::Display for SupportMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cell = |s: &str, w: usize| format!("{s:<w$}");
        let mut head = cell("type", 8) + &cell("writes", 7);
        for b in &self.backends {
            head += &cell(b, 12);
        }
        write!(f, "{}", head.trim_end())?;
        for (ty, writes, forms) in &self.rows {
            let mut line =
                cell(&ty.to_string(), 8) + cell(if *writes { "yes" } else { "-" }, 7).as_str();
            for form in forms {
                line += &cell(form.unwrap_or("-"), 12);
            }
            write!(f, "\n{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_refusing_a_type_shows_as_its_gap() {
        fn floats_only(ty: GgmlType) -> Option<&'static str> {
            (ty.block_size() == 1).then_some("f32")
        }
        let m = support_matrix(&[("reference", reference_form), ("toy", floats_only)]);
        assert_eq!(m.rows.len(), FORMATS.len());
        assert!(m.gaps("reference").is_empty());
        assert!(m.gaps("toy").contains(&GgmlType::Q4_K));
        assert!(!m.gaps("toy").contains(&GgmlType::F16));
        let text = m.to_string();
        assert!(text
            .lines()
            .next()
            .unwrap()
            .starts_with("type    writes reference   toy"));
        assert!(text.contains("\nQ2_K    yes    f32         -\n"), "{text}");
        assert!(text.contains("\nIQ1_M   -      f32         -"), "{text}");
    }
}
