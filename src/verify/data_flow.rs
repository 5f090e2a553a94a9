//! Whether a program's accesses can depend on its arrays' data.
//!
//! Contract: [`accesses_depend_on_data`] is false only when no value read from an array
//! (global or shared), directly or through slots assigned from one, reaches anything that
//! decides which accesses run or where they land: a branch, an index, a fact, a launch's
//! arguments or grid, the condition of a `?:` or the left side of `&&`/`||` whose other part
//! reads memory. Slots are followed flow-insensitively (a slot assigned from data anywhere is
//! data everywhere), so a `false` is sound and a `true` may be conservative. The engine uses
//! it to run a repeated kernel launch once (`machine::run`).

use super::code::{Code, Instr, E};

/// Whether some access of `code` (which runs, or where) may depend on array data.
pub fn accesses_depend_on_data(code: &Code) -> bool {
    let tainted = tainted_slots(code);
    let data = |e: &E| reads_data(e, &tainted);
    let decides = |e: &E| decides_from_data(e, &tainted);
    let launches_decide = code.launches.iter().any(|l| l.args.iter().flatten().any(|s| tainted[*s]) || l.grid.iter().any(|g| data(g) || decides(g)));
    launches_decide
        || code.instrs.iter().any(|i| match i {
            Instr::Set { value, .. } => decides(value),
            Instr::Store { indices, value, .. } => indices.iter().any(|x| data(x) || decides(x)) || decides(value),
            Instr::JumpUnless(cond, _) | Instr::Fact { cond, .. } => data(cond) || decides(cond),
            Instr::Jump(_) | Instr::Barrier(_) | Instr::Launch(_) | Instr::Compare(_) => false,
        })
}

/// The slots `code` reads anywhere (a parameter it never reads cannot change what it does).
pub fn slots_read(code: &Code) -> Vec<bool> {
    fn mark(e: &E, read: &mut [bool]) {
        if let E::Slot(s) = e {
            read[*s] = true;
        }
        for c in children(e) {
            mark(c, read);
        }
    }
    let mut read = vec![false; code.slot_types.len()];
    for i in &code.instrs {
        match i {
            Instr::Set { slot, op, value } => {
                // `s op= v` reads `s` unless it is a plain assignment.
                if !matches!(op, crate::frontend::ast::AssignOp::Set) {
                    read[*slot] = true;
                }
                mark(value, &mut read);
            }
            Instr::Store { indices, value, .. } => {
                for x in indices {
                    mark(x, &mut read);
                }
                mark(value, &mut read);
            }
            Instr::JumpUnless(cond, _) | Instr::Fact { cond, .. } => mark(cond, &mut read),
            Instr::Jump(_) | Instr::Barrier(_) | Instr::Launch(_) | Instr::Compare(_) => {}
        }
    }
    for l in &code.launches {
        for s in l.args.iter().flatten() {
            read[*s] = true;
        }
        for g in &l.grid {
            mark(g, &mut read);
        }
    }
    read
}

/// The slots that may hold a value computed from array data (a fixpoint over assignments).
fn tainted_slots(code: &Code) -> Vec<bool> {
    let mut tainted = vec![false; code.slot_types.len()];
    loop {
        let mut changed = false;
        for i in &code.instrs {
            if let Instr::Set { slot, value, .. } = i {
                if !tainted[*slot] && reads_data(value, &tainted) {
                    tainted[*slot] = true;
                    changed = true;
                }
            }
        }
        if !changed {
            return tainted;
        }
    }
}

/// Whether `e`'s value may come from array data.
fn reads_data(e: &E, tainted: &[bool]) -> bool {
    match e {
        E::Const(_) | E::Builtin(_) => false,
        E::Slot(s) => tainted[*s],
        E::Load { .. } => true,
        E::Neg(a) | E::Not(a) | E::Cast(_, a) => reads_data(a, tainted),
        E::And(a, b) | E::Or(a, b) | E::Binary(_, a, b) => reads_data(a, tainted) || reads_data(b, tainted),
        E::Cond(_, c, a, b) => reads_data(c, tainted) || reads_data(a, tainted) || reads_data(b, tainted),
        E::Call(_, args) => args.iter().any(|a| reads_data(a, tainted)),
    }
}

/// Whether evaluating `e` makes an access that data decides: a load whose index comes from
/// data, or a load that runs or not by a condition that does (`?:`, `&&`, `||`).
fn decides_from_data(e: &E, tainted: &[bool]) -> bool {
    let here = match e {
        E::Load { indices, .. } => indices.iter().any(|x| reads_data(x, tainted)),
        E::And(a, b) | E::Or(a, b) => reads_data(a, tainted) && loads(b),
        E::Cond(_, c, a, b) => reads_data(c, tainted) && (loads(a) || loads(b)),
        _ => false,
    };
    here || children(e).iter().any(|c| decides_from_data(c, tainted))
}

/// Whether `e` reads memory.
fn loads(e: &E) -> bool {
    matches!(e, E::Load { .. }) || children(e).iter().any(|c| loads(c))
}

fn children(e: &E) -> Vec<&E> {
    match e {
        E::Const(_) | E::Slot(_) | E::Builtin(_) => Vec::new(),
        E::Load { indices, .. } => indices.iter().collect(),
        E::Neg(a) | E::Not(a) | E::Cast(_, a) => vec![&**a],
        E::And(a, b) | E::Or(a, b) | E::Binary(_, a, b) => vec![&**a, &**b],
        E::Cond(_, c, a, b) => vec![&**c, &**a, &**b],
        E::Call(_, args) => args.iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::ast::{AssignOp, BinOp, ScalarType};
    use crate::verify::code::LaunchSite;
    use crate::verify::value::Value;

    fn load(index: E) -> E {
        E::Load { array: 0, indices: vec![index], site: 0 }
    }

    fn int(v: i32) -> E {
        E::Const(Value::Int(v))
    }

    /// Slot 0 an integer parameter, slot 1 a local.
    fn code(instrs: Vec<Instr>) -> Code {
        Code { instrs, slot_types: vec![ScalarType::Int, ScalarType::Int], slot_names: vec!["p".into(), "x".into()], params: 1, ..Code::default() }
    }

    fn store(index: E, value: E) -> Instr {
        Instr::Store { array: 0, indices: vec![index], op: AssignOp::Set, value, site: 0 }
    }

    #[test]
    fn data_that_only_flows_into_stored_values_decides_nothing() {
        let c = code(vec![Instr::Set { slot: 1, op: AssignOp::Set, value: load(E::Slot(0)) }, store(E::Slot(0), E::Binary(BinOp::Add, Box::new(E::Slot(1)), Box::new(load(int(1)))))]);
        assert!(!accesses_depend_on_data(&c));
        // A `?:` or `&&` on data that reads no memory in its other parts decides nothing.
        let pick = E::Cond(ScalarType::Int, Box::new(E::Slot(1)), Box::new(int(1)), Box::new(int(2)));
        assert!(!accesses_depend_on_data(&code(vec![Instr::Set { slot: 1, op: AssignOp::Set, value: load(int(0)) }, store(int(0), pick)])));
    }

    #[test]
    fn data_reaching_an_index_a_branch_or_a_guarded_load_decides_accesses() {
        let x_from_data = Instr::Set { slot: 1, op: AssignOp::Set, value: load(E::Slot(0)) };
        // An index through a local assigned from data, even one assigned later.
        assert!(accesses_depend_on_data(&code(vec![store(E::Slot(1), int(0)), x_from_data.clone()])));
        // An index that loads.
        assert!(accesses_depend_on_data(&code(vec![store(int(0), load(load(int(0))))])));
        // A branch.
        assert!(accesses_depend_on_data(&code(vec![x_from_data.clone(), Instr::JumpUnless(E::Slot(1), 3), store(int(0), int(1))])));
        // A load that runs or not by data: `?:`, `&&`, `||`.
        let guarded = E::Cond(ScalarType::Int, Box::new(E::Slot(1)), Box::new(load(int(1))), Box::new(int(2)));
        assert!(accesses_depend_on_data(&code(vec![x_from_data.clone(), store(int(0), guarded)])));
        let and = E::And(Box::new(E::Slot(1)), Box::new(load(int(1))));
        assert!(accesses_depend_on_data(&code(vec![x_from_data.clone(), Instr::Set { slot: 1, op: AssignOp::Set, value: and }])));
        // A launch's argument or grid.
        let mut c = code(vec![x_from_data]);
        c.launches.push(LaunchSite { schedule: 0, args: vec![Some(1)], grid: vec![int(1)] });
        assert!(accesses_depend_on_data(&c));
        c.launches[0] = LaunchSite { schedule: 0, args: vec![Some(0)], grid: vec![E::Slot(1)] };
        assert!(accesses_depend_on_data(&c));
        c.launches[0].grid = vec![E::Slot(0)];
        assert!(!accesses_depend_on_data(&c));
    }

    #[test]
    fn slots_read_counts_compound_assignments_and_launches() {
        let c = code(vec![Instr::Set { slot: 1, op: AssignOp::Set, value: int(0) }]);
        assert_eq!(slots_read(&c), vec![false, false], "a plain assignment reads nothing");
        let c = code(vec![Instr::Set { slot: 1, op: AssignOp::Add, value: int(1) }]);
        assert_eq!(slots_read(&c), vec![false, true], "`x += 1` reads x");
        let c = code(vec![store(E::Slot(0), int(1))]);
        assert_eq!(slots_read(&c), vec![true, false]);
        let mut c = code(Vec::new());
        c.launches.push(LaunchSite { schedule: 0, args: vec![None, Some(1)], grid: vec![E::Slot(0)] });
        assert_eq!(slots_read(&c), vec![true, true]);
    }
}
