//! What `metafork parse` prints: each kernel function's classified parameters, arrays,
//! derived scalars, facts and schedules, as serialisable records (YAML or JSON).
//! Polynomials use the `constraints` crate's infix syntax; expressions are printed as C.

use crate::frontend::model::*;
use serde::Serialize;

#[derive(Serialize, Debug)]
pub struct ParseReport {
    pub file: String,
    pub kernels: Vec<KernelReport>,
}

#[derive(Serialize, Debug)]
pub struct KernelReport {
    pub name: String,
    pub data_parameters: Vec<String>,
    pub program_parameters: Vec<String>,
    /// Floating scalars: plain values, never symbols of a constraint.
    pub values: Vec<String>,
    pub arrays: Vec<ArrayReport>,
    pub derived: Vec<DerivedReport>,
    pub facts: Vec<FactReport>,
    pub schedules: Vec<ScheduleReport>,
}

#[derive(Serialize, Debug)]
pub struct ArrayReport {
    pub name: String,
    pub element_type: String,
    #[serde(rename = "const")]
    pub is_const: bool,
    pub extents: Vec<String>,
}

#[derive(Serialize, Debug)]
pub struct DerivedReport {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polynomial: Option<String>,
}

#[derive(Serialize, Debug)]
pub struct FactReport {
    pub kind: String,
    pub condition: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// Why a `defined` fact holds (`the program divides by it`, `` `v * B + u` stays within `int` ``).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Serialize, Debug)]
pub struct ScheduleReport {
    pub name: String,
    pub cache: Vec<String>,
    pub host_loops: Vec<SerialReport>,
    pub grid: Vec<LoopReport>,
    /// Serial loops between the grid and block groups.
    pub serial: Vec<SerialReport>,
    pub block: Vec<LoopReport>,
    pub split_by_tool: bool,
}

#[derive(Serialize, Debug)]
pub struct LoopReport {
    pub var: String,
    pub lo: String,
    pub hi: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extent: Option<String>,
    pub maps_to: String,
}

#[derive(Serialize, Debug)]
pub struct SerialReport {
    pub var: String,
    pub lo: String,
    /// `< hi` or `<= hi`.
    pub bound: String,
    pub step: i64,
}

fn serial(l: &SerialLoop) -> SerialReport {
    SerialReport {
        var: l.var.clone(),
        lo: l.lo.to_string(),
        bound: format!("{} {}", if l.inclusive { "<=" } else { "<" }, l.hi),
        step: l.step,
    }
}

fn par(l: &ParLoop) -> LoopReport {
    LoopReport {
        var: l.var.clone(),
        lo: l.lo.to_string(),
        hi: l.hi.to_string(),
        extent: l.extent.as_ref().map(|p| p.to_string()),
        maps_to: l.maps_to.clone(),
    }
}

pub fn parse_report(file: &str, program: &CheckedProgram) -> ParseReport {
    ParseReport {
        file: file.to_string(),
        kernels: program
            .kernels
            .iter()
            .map(|k| KernelReport {
                name: k.name.clone(),
                data_parameters: k.data_parameters(),
                program_parameters: k.program_parameters(),
                values: k.value_parameters(),
                arrays: k
                    .arrays
                    .iter()
                    .map(|a| ArrayReport {
                        name: a.name.clone(),
                        element_type: a.elem.c_name().to_string(),
                        is_const: a.is_const,
                        extents: a.extents.iter().map(|p| p.to_string()).collect(),
                    })
                    .collect(),
                derived: k
                    .derived
                    .iter()
                    .map(|d| DerivedReport {
                        name: d.name.clone(),
                        ty: d.ty.c_name().to_string(),
                        value: d.value.to_string(),
                        polynomial: d.poly.as_ref().map(|p| p.to_string()),
                    })
                    .collect(),
                facts: k
                    .facts
                    .iter()
                    .map(|f| FactReport {
                        kind: match f.kind {
                            FactKind::Assume => "assume",
                            FactKind::Assert => "assert",
                            FactKind::Defined => "defined",
                        }
                        .to_string(),
                        condition: f.condition.to_string(),
                        constraint: f.constraint.as_ref().map(|c| c.to_string()),
                        note: f.note.clone(),
                    })
                    .collect(),
                schedules: k
                    .schedules
                    .iter()
                    .map(|s| ScheduleReport {
                        name: s.name.clone(),
                        cache: s.cache.clone(),
                        host_loops: s.host_loops.iter().map(serial).collect(),
                        grid: s.grid.iter().map(par).collect(),
                        serial: s.between.iter().map(serial).collect(),
                        block: s.block.iter().map(par).collect(),
                        split_by_tool: s.split_by_tool,
                    })
                    .collect(),
            })
            .collect(),
    }
}
