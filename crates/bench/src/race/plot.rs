//! The race's plots, as SVG: total output tok/s against users (one plot per prompt size)
//! and TTFT against prompt tokens (at the fewest users), one line per target.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::summary::Cell;
use super::{file_name, RaceResult};

/// One line: a target's points.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

fn draw(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), String> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (x_max, y_max) = all.fold((0.0f64, 0.0f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..(x_max * 1.1).max(1.0), 0.0..(y_max * 1.15).max(1e-3))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Draws the plots into `dir`; returns their paths.
pub fn plots(r: &RaceResult, cells: &[Cell], dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let series =
        |f: &dyn Fn(&Cell) -> Option<(f64, f64)>, keep: &dyn Fn(&Cell) -> bool| -> Vec<Series> {
            r.targets
                .iter()
                .map(|t| Series {
                    name: t.name.clone(),
                    points: cells
                        .iter()
                        .filter(|c| c.target == t.name && keep(c))
                        .filter_map(f)
                        .collect(),
                })
                .filter(|s| !s.points.is_empty())
                .collect()
        };
    for size in &r.sizes {
        let path = dir.join(format!("total-tok-s-{}.svg", file_name(&size.label)));
        let s = series(&|c| Some((c.users as f64, c.total_tok_s?)), &|c| {
            c.size == size.label
        });
        draw(
            &path,
            &format!("total output tok/s, {} prompts", size.label),
            "users",
            "tok/s",
            &s,
        )?;
        files.push(path);
    }
    let fewest = r.users.iter().copied().min().unwrap_or(1);
    let path = dir.join("ttft.svg");
    let s = series(&|c| Some((c.prompt_tokens?, c.ttft_s?)), &|c| {
        c.users == fewest
    });
    draw(
        &path,
        &format!("time to first token, {fewest} user(s)"),
        "prompt tokens",
        "seconds",
        &s,
    )?;
    files.push(path);
    Ok(files)
}
