//! Salience: how much a memory still matters. A stored value and the time it was computed; it
//! halves every half-life unused and is pulled toward 1 by each use (a recall hit returned, a
//! `get`, a traversal reaching it). Computed lazily where it is read, so time passing writes
//! nothing.

use crate::model::{Memory, Millis};

/// Default half-life of salience, in days.
pub const DEFAULT_HALF_LIFE_DAYS: f64 = 30.0;
/// Share of the distance to 1 that one use adds.
pub const REINFORCEMENT: f64 = 0.2;

const DAY_MS: f64 = 86_400_000.0;

/// `salience` computed at `at`, decayed to `now` with the half-life `half_life_days`, by whole
/// days of age: memories stored or used on the same day keep equal saliences, so recall's boost
/// never reorders ties by milliseconds (pages of one query stay consistent while its hits are
/// reinforced).
pub fn decayed(salience: f64, at: Millis, now: Millis, half_life_days: f64) -> f64 {
    let age_days = ((now - at).max(0) / DAY_MS as i64) as f64;
    (salience * 0.5f64.powf(age_days / half_life_days)).clamp(0.0, 1.0)
}

/// The salience after one use at `now`.
pub fn reinforced(salience: f64, at: Millis, now: Millis) -> f64 {
    let s = decayed(salience, at, now, DEFAULT_HALF_LIFE_DAYS);
    s + (1.0 - s) * REINFORCEMENT
}

/// The salience after a use at `now`, or `None` when the memory was reinforced (or stored)
/// less than a day before: salience counts the days a memory was used, not the calls — a burst
/// of recalls in one session is one use, and the ranking of one query stays the same from call
/// to call within a day (pages of one query agree with one big page).
pub fn on_use(salience: f64, at: Millis, now: Millis) -> Option<f64> {
    (now - at >= DAY_MS as i64).then(|| reinforced(salience, at, now))
}

/// A memory's salience now, with the default half-life.
pub fn of(m: &Memory, now: Millis) -> f64 {
    decayed(m.salience, m.salience_at, now, DEFAULT_HALF_LIFE_DAYS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salience_halves_every_half_life_and_use_pulls_it_up() {
        let day = DAY_MS as i64;
        assert!((decayed(0.8, 0, 30 * day, 30.0) - 0.4).abs() < 1e-9);
        assert!((decayed(0.8, 0, 60 * day, 30.0) - 0.2).abs() < 1e-9);
        assert_eq!(decayed(0.8, 10, 0, 30.0), 0.8, "no growth before its time");
        assert_eq!(decayed(0.8, 0, day - 1, 30.0), 0.8, "whole days only");
        let once = reinforced(0.5, 0, 0);
        assert!((once - 0.6).abs() < 1e-9);
        assert!(reinforced(once, 0, 0) > once);
        assert!(reinforced(1.0, 0, 0) <= 1.0);
        // One reinforcement a day: a use within a day of the last changes nothing.
        assert_eq!(on_use(0.5, 0, day - 1), None);
        assert_eq!(on_use(0.5, 0, day), Some(reinforced(0.5, 0, day)));
    }
}
