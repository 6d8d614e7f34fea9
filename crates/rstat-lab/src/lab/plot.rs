//! The lab report's plots: horizontal grouped bars and line charts, as SVG
//! strings, drawn with `plotters`' SVG backend (text is written as SVG
//! `<text>`; no font or image library is involved).

use plotters::coord::Shift;
use plotters::prelude::*;

/// One figure with its spread: the median and the lowest and highest run.
#[derive(Clone, Copy, Debug)]
pub struct Val {
    /// Median over the runs.
    pub med: f64,
    /// Lowest run.
    pub lo: f64,
    /// Highest run.
    pub hi: f64,
}

/// One category of a bar panel: its label and one value per series
/// (`None`: no bar).
pub struct Cat {
    /// Label on the axis.
    pub label: String,
    /// One value per series.
    pub vals: Vec<Option<Val>>,
}

/// One line of a line panel.
pub struct Line {
    /// Legend label.
    pub name: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

/// A panel to draw.
pub enum Panel {
    /// Horizontal grouped bars.
    Bars {
        /// Panel title.
        title: String,
        /// Value axis description.
        x_desc: String,
        /// Series names (legend), one per value of each category.
        series: Vec<String>,
        /// Categories, top to bottom.
        cats: Vec<Cat>,
    },
    /// Line chart.
    Lines {
        /// Panel title.
        title: String,
        /// X axis description.
        x_desc: String,
        /// Y axis description.
        y_desc: String,
        /// The lines.
        lines: Vec<Line>,
        /// Logarithmic x axis.
        log_x: bool,
        /// Logarithmic y axis.
        log_y: bool,
    },
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Axis labels: no decimals from 100 up, thousands as `k`, millions as `M`.
fn fmt_num(v: &f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || *v == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Draw `panels` in a grid of `cols` columns, each `w` x 400 pixels, under
/// a `title` and a `subtitle` (the machine line).
pub fn figure(
    title: &str,
    subtitle: &str,
    panels: &[Panel],
    cols: usize,
    w: u32,
) -> Result<String, String> {
    let cols = cols.clamp(1, panels.len().max(1));
    let rows = panels.len().max(1).div_ceil(cols);
    let mut buf = String::new();
    {
        let size = (w * cols as u32, 400 * rows as u32 + 50);
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root
            .titled(title, ("sans-serif", 18))
            .map_err(|e| e.to_string())?;
        let (sub, body) = root.split_vertically(22);
        sub.draw_text(
            subtitle,
            &("sans-serif", 12).into_font().color(&RGBColor(90, 90, 90)),
            (10, 4),
        )
        .map_err(|e| e.to_string())?;
        let areas = body.split_evenly((rows, cols));
        for (p, a) in panels.iter().zip(areas.iter()) {
            match p {
                Panel::Bars {
                    title,
                    x_desc,
                    series,
                    cats,
                } => bars(a, title, x_desc, series, cats)?,
                Panel::Lines {
                    title,
                    x_desc,
                    y_desc,
                    lines: ls,
                    log_x,
                    log_y,
                } => lines(a, title, x_desc, y_desc, ls, *log_x, *log_y)?,
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

fn bars(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    x_desc: &str,
    series: &[String],
    cats: &[Cat],
) -> Result<(), String> {
    let nc = cats.len().max(1);
    let ns = series.len().max(1);
    let top = cats
        .iter()
        .flat_map(|c| c.vals.iter().flatten())
        .map(|v| v.hi.max(v.med))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.12 } else { 1.0 };
    let labels: Vec<String> = cats.iter().map(|c| c.label.clone()).collect();
    let label_w = labels.iter().map(|l| l.len()).max().unwrap_or(4).min(34) as u32 * 7 + 10;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(label_w)
        .build_cartesian_2d(0f64..top, -0.5f64..(nc as f64 - 0.5))
        .map_err(|e| e.to_string())?;
    let fmt_y = |y: &f64| {
        let i = y.round();
        if (y - i).abs() > 0.01 || i < 0.0 {
            return String::new();
        }
        // Top to bottom: category 0 at the top.
        let k = nc as f64 - 1.0 - i;
        labels.get(k as usize).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(nc + 1)
        .y_label_formatter(&fmt_y)
        .x_label_formatter(&fmt_num)
        .x_desc(x_desc)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    let band = 0.8 / ns as f64;
    for (s, name) in series.iter().enumerate() {
        let c = color(s);
        let mut rects = Vec::new();
        let mut whiskers = Vec::new();
        for (k, cat) in cats.iter().enumerate() {
            let Some(Some(v)) = cat.vals.get(s) else {
                continue;
            };
            if !v.med.is_finite() {
                continue;
            }
            let y_mid = nc as f64 - 1.0 - k as f64;
            let y0 = y_mid + 0.4 - band * (s as f64 + 1.0);
            let y1 = y0 + band * 0.9;
            rects.push(Rectangle::new(
                [(0.0, y0), (v.med.max(0.0), y1)],
                c.filled(),
            ));
            if v.hi > v.lo {
                let ym = (y0 + y1) / 2.0;
                whiskers.push(PathElement::new(vec![(v.lo, ym), (v.hi, ym)], BLACK));
            }
        }
        chart
            .draw_series(rects)
            .map_err(|e| e.to_string())?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        chart.draw_series(whiskers).map_err(|e| e.to_string())?;
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn range(vals: impl Iterator<Item = f64> + Clone, log: bool) -> (f64, f64) {
    let ok = |v: &f64| v.is_finite() && (!log || *v > 0.0);
    let lo = vals.clone().filter(ok).fold(f64::INFINITY, f64::min);
    let hi = vals.filter(ok).fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let lo = lo.min(0.0);
        (lo, if hi > lo { hi * 1.08 } else { lo + 1.0 })
    }
}

/// Draw a line chart; a macro so the four linear/log combinations share
/// one body (they are different coordinate types).
macro_rules! line_chart {
    ($area:expr, $title:expr, $xd:expr, $yd:expr, $lines:expr, $xr:expr, $yr:expr, $log:expr) => {{
        let mut chart = ChartBuilder::on($area)
            .caption($title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(38)
            .y_label_area_size(62)
            .build_cartesian_2d($xr, $yr)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc($xd)
            .y_desc($yd)
            .y_label_formatter(&|v: &f64| fmt_num(v))
            .x_label_formatter(&|v: &f64| fmt_num(v))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, l) in $lines.iter().enumerate() {
            let c = color(i);
            let pts: Vec<(f64, f64)> = l
                .points
                .iter()
                .copied()
                .filter(|(x, y)| {
                    x.is_finite() && y.is_finite() && (!$log.0 || *x > 0.0) && (!$log.1 || *y > 0.0)
                })
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(l.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            if pts.len() <= 12 {
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| e.to_string())?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }};
}

fn lines(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    ls: &[Line],
    log_x: bool,
    log_y: bool,
) -> Result<(), String> {
    let xs = ls.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let ys = ls.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let (x0, x1) = range(xs, log_x);
    let (y0, y1) = range(ys, log_y);
    let flags = (log_x, log_y);
    match (log_x, log_y) {
        (false, false) => line_chart!(area, title, x_desc, y_desc, ls, x0..x1, y0..y1, flags),
        (true, false) => {
            line_chart!(
                area,
                title,
                x_desc,
                y_desc,
                ls,
                (x0..x1).log_scale(),
                y0..y1,
                flags
            )
        }
        (false, true) => {
            line_chart!(
                area,
                title,
                x_desc,
                y_desc,
                ls,
                x0..x1,
                (y0..y1).log_scale(),
                flags
            )
        }
        (true, true) => line_chart!(
            area,
            title,
            x_desc,
            y_desc,
            ls,
            (x0..x1).log_scale(),
            (y0..y1).log_scale(),
            flags
        ),
    }
    Ok(())
}
