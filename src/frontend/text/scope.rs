//! SSA value names of one function: `%name` → the values it stands for, with nested regions
//! opening scopes whose names disappear when the region closes.

use std::collections::HashMap;

use crate::ir::ValueId;

/// A name binding: the scope level it was made in and the values (several for `%x:2`).
struct Binding {
    level: usize,
    values: Vec<ValueId>,
}

/// Name → values, with an undo log so closing a region restores shadowed names.
#[derive(Default)]
pub(super) struct Scope {
    names: HashMap<String, Binding>,
    undo: Vec<(String, Option<Binding>)>,
    marks: Vec<usize>,
}

impl Scope {
    /// Opens a nested scope (a region).
    pub fn push(&mut self) {
        self.marks.push(self.undo.len());
    }

    /// Closes the innermost scope, forgetting its names and restoring shadowed ones.
    pub fn pop(&mut self) {
        let mark = self.marks.pop().unwrap_or(0);
        while self.undo.len() > mark {
            let Some((name, old)) = self.undo.pop() else {
                break;
            };
            match old {
                Some(b) => {
                    self.names.insert(name, b);
                }
                None => {
                    self.names.remove(&name);
                }
            }
        }
    }

    /// Binds `name`; false if it is already defined in the current scope.
    pub fn bind(&mut self, name: &str, values: Vec<ValueId>) -> bool {
        let level = self.marks.len();
        if self.names.get(name).is_some_and(|b| b.level == level) {
            return false;
        }
        let old = self
            .names
            .insert(name.to_string(), Binding { level, values });
        self.undo.push((name.to_string(), old));
        true
    }

    /// The values bound to `name`.
    pub fn get(&self, name: &str) -> Option<&[ValueId]> {
        self.names.get(name).map(|b| b.values.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_scopes_shadow_and_restore() {
        let mut s = Scope::default();
        assert!(s.bind("a", vec![ValueId(0)]));
        assert!(!s.bind("a", vec![ValueId(1)]));
        s.push();
        assert!(s.bind("a", vec![ValueId(2)]));
        assert!(s.bind("b", vec![ValueId(3)]));
        assert_eq!(s.get("a"), Some(&[ValueId(2)][..]));
        s.pop();
        assert_eq!(s.get("a"), Some(&[ValueId(0)][..]));
        assert_eq!(s.get("b"), None);
    }
}
