//! The plan's text rendering, stable for the plan snapshot tests (`tests/it/plans.rs`).

use std::fmt;

use super::{Access, Plan};
use crate::query::matcher::dir_name;
use crate::value::Value;

pub(super) fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Integer(i) => i.to_string(),
        Value::Double(d) => format!("{d:?}"),
        Value::Reference(r) => format!("ref({r})"),
        other => format!("{other:?}"),
    }
}

impl fmt::Display for Plan {
    /// A stable text rendering for plan tests.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order: Vec<String> = self
            .order
            .iter()
            .map(|o| format!("{} {}", o.field, dir_name(o.dir)))
            .collect();
        writeln!(
            f,
            "order by {}{}",
            order.join(", "),
            if self.reversed {
                " (read from the end)"
            } else {
                ""
            }
        )?;
        if self.branches.len() > 1 {
            writeln!(f, "merge {} branches", self.branches.len())?;
        }
        for b in &self.branches {
            let dir = if b.reverse { "backward" } else { "forward" };
            let eq = if b.equalities.is_empty() {
                String::new()
            } else {
                format!(" where {}", b.equalities.join(" and "))
            };
            match &b.access {
                Access::Documents { ranges } => {
                    writeln!(f, "  documents {dir}, {} range(s){eq}", ranges.len())?
                }
                Access::Index { def, ranges } => writeln!(
                    f,
                    "  index {} {dir}, {} range(s){eq}",
                    def.canonical(),
                    ranges.len()
                )?,
                Access::ZigZag { scans } => {
                    writeln!(f, "  zig-zag join {dir}{eq}")?;
                    for s in scans {
                        writeln!(f, "    index {}", s.def.canonical())?;
                    }
                }
            }
        }
        Ok(())
    }
}
