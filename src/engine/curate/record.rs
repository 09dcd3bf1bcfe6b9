//! The recorded write path of a run: every change keeps the previous version in history under
//! the run's id (`null` when the run created the row) and appends to the change log, in the
//! caller's transaction.

use crate::engine::curate::Run;
use crate::engine::write::snapshot;
use crate::error::Result;
use crate::model::{Memory, NewMemory};
use crate::store::history::{self, Entity};
use crate::store::relations::{self, RelationRow};
use crate::store::{Db, changes, memories};

impl Run<'_> {
    /// Keeps `previous` (`null`: the run creates the row) in history under the run's id.
    fn history(
        &self,
        tx: &Db,
        entity: Entity,
        key: i64,
        op: &str,
        previous: &serde_json::Value,
    ) -> Result<()> {
        history::record_in_run(
            tx,
            entity,
            key,
            op,
            &self.actor,
            self.now,
            previous,
            &self.id,
        )
    }

    /// Replaces memory `old` by `new` (same key).
    pub(crate) fn save_memory(&self, tx: &Db, old: &Memory, new: &Memory, op: &str) -> Result<()> {
        self.history(tx, Entity::Memory, old.key.0, op, &snapshot(old))?;
        memories::save_all(tx, new)?;
        let change = if new.deleted_at.is_some() {
            changes::ChangeOp::Delete
        } else {
            changes::ChangeOp::Upsert
        };
        changes::log_memory(tx, new.key, change)
    }

    /// Creates memory `new` with `stamps`; returns it.
    pub(crate) fn insert_memory(
        &self,
        tx: &Db,
        new: &NewMemory,
        stamps: memories::Stamps,
        op: &str,
    ) -> Result<Memory> {
        let m = memories::insert_with(tx, &crate::store::new_id("m_"), new, stamps)?;
        self.history(tx, Entity::Memory, m.key.0, op, &serde_json::Value::Null)?;
        changes::log_memory(tx, m.key, changes::ChangeOp::Insert)?;
        Ok(m)
    }

    /// Replaces relation `old` by `new` (same key).
    pub(crate) fn save_relation(
        &self,
        tx: &Db,
        old: &RelationRow,
        new: &RelationRow,
        op: &str,
    ) -> Result<()> {
        self.history(
            tx,
            Entity::Relation,
            old.key,
            op,
            &serde_json::to_value(old)?,
        )?;
        relations::write_row(tx, new)?;
        changes::log_relation(tx, new.key)
    }

    /// Creates relation `new`; returns its key.
    pub(crate) fn insert_relation(&self, tx: &Db, new: &RelationRow, op: &str) -> Result<i64> {
        let key = relations::insert_row(tx, new)?;
        self.history(tx, Entity::Relation, key, op, &serde_json::Value::Null)?;
        changes::log_relation(tx, key)?;
        Ok(key)
    }
}
