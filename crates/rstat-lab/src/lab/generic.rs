//! How the lab shows an experiment that has no view of its own: a table of
//! its JSON's numbers and a bar plot of its `ns` and `mops` figures (of its
//! first numbers if no field names either). These are the defaults of
//! [`super::Experiment::view`] and [`super::Experiment::plot`], so a new
//! experiment is in the report from its first run.

use serde_json::Value;

use super::figures::{md_table, Fig, View};
use super::plot::{figure, Cat, Panel};

/// Numbers at the top level of an object, and one level into objects
/// (not `machine`), as (pointer, label).
fn numeric_fields(v: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Value::Object(o) = v {
        for (k, x) in o {
            match x {
                Value::Number(_) => out.push((format!("/{k}"), k.clone())),
                Value::Object(inner) if k != "machine" => {
                    for (k2, y) in inner {
                        if y.is_number() {
                            out.push((format!("/{k}/{k2}"), format!("{k}.{k2}")));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// A table of the JSON's numbers.
pub fn view(f: &Fig) -> View {
    let rows: Vec<Vec<String>> = numeric_fields(f.med)
        .into_iter()
        .map(|(p, l)| vec![format!("`{l}`"), f.f(&p, 3)])
        .collect();
    View {
        ours: String::new(),
        table: md_table(&["field", "value"], &rows),
        notes: "Shown generically: this experiment has no view of its own yet.".into(),
    }
}

/// Bars of the JSON's `ns` and `mops` numbers (of its first numbers if no
/// field names either).
pub fn plot(f: &Fig, machine: &str) -> Result<String, String> {
    let fields = numeric_fields(f.med);
    let pick = |unit: &str| -> Vec<Cat> {
        fields
            .iter()
            .filter(|(_, l)| l.contains(unit))
            .filter_map(|(p, l)| {
                Some(Cat {
                    label: l.clone(),
                    vals: vec![Some(f.val(p)?)],
                })
            })
            .collect()
    };
    let mut panels = Vec::new();
    for (unit, desc) in [("ns", "ns"), ("mops", "Mops/s")] {
        let cats = pick(unit);
        if !cats.is_empty() {
            panels.push(Panel::Bars {
                title: format!("fields with `{unit}`"),
                x_desc: desc.into(),
                series: vec!["median".into()],
                cats,
            });
        }
    }
    if panels.is_empty() {
        // No field names a unit: plot the first numbers as they are.
        let cats: Vec<Cat> = fields
            .iter()
            .take(12)
            .filter_map(|(p, l)| {
                Some(Cat {
                    label: l.clone(),
                    vals: vec![Some(f.val(p)?)],
                })
            })
            .collect();
        if cats.is_empty() {
            return Err("its JSON has no numbers to plot".into());
        }
        panels.push(Panel::Bars {
            title: "its numbers (mixed units)".into(),
            x_desc: "value".into(),
            series: vec!["median".into()],
            cats,
        });
    }
    figure("generic view", machine, &panels, 2, 640)
}
