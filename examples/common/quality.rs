//! What the recall-quality examples over dialogue data share: the scores of one ranking
//! (recall@5, recall@10 and NDCG@10 against a question's relevant memories, R@10 per category,
//! recall latency) and the two tables they print.

use std::collections::BTreeMap;

/// The page size scored.
pub(crate) const K: usize = 10;

/// Scores of one ranking.
#[derive(Default)]
pub(crate) struct Score {
    pub(crate) r5: f64,
    pub(crate) r10: f64,
    pub(crate) ndcg: f64,
    /// R@10 summed and questions counted per category.
    pub(crate) by_category: BTreeMap<String, (f64, usize)>,
    pub(crate) n: usize,
    pub(crate) times_ms: Vec<f64>,
}

impl Score {
    /// Scores one question: the ranked names, whether a name is relevant, how many are
    /// relevant (at least one), its category, and how long the recall took.
    pub(crate) fn add(
        &mut self,
        ranked: &[String],
        relevant: impl Fn(&str) -> bool,
        n_relevant: usize,
        category: &str,
        ms: f64,
    ) {
        let n = n_relevant.max(1) as f64;
        let hit = |k: usize| ranked.iter().take(k).filter(|r| relevant(r)).count();
        self.times_ms.push(ms);
        self.r5 += hit(5) as f64 / n;
        self.r10 += hit(K) as f64 / n;
        let c = self.by_category.entry(category.to_owned()).or_default();
        c.0 += hit(K) as f64 / n;
        c.1 += 1;
        let dcg: f64 = ranked
            .iter()
            .take(K)
            .enumerate()
            .filter(|(_, r)| relevant(r))
            .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
            .sum();
        let ideal: f64 = (0..n_relevant.min(K))
            .map(|i| 1.0 / ((i + 2) as f64).log2())
            .sum();
        self.ndcg += dcg / ideal;
        self.n += 1;
    }
}

/// Prints the table of every ranking (`names`, in the order of `scores`), then R@10 by
/// category (`category` names the column), one column per ranking.
pub(crate) fn print_tables(
    names: &[&str],
    scores: &mut [Score],
    category: &str,
    count: &str,
    mut line: impl FnMut(String),
) {
    line("| ranking | R@5 | R@10 | NDCG@10 | p50 | p99 |".into());
    line("|---|---:|---:|---:|---:|---:|".into());
    for (name, s) in names.iter().zip(scores.iter_mut()) {
        s.times_ms.sort_by(f64::total_cmp);
        let q = |f: f64| s.times_ms[((s.times_ms.len() as f64 * f).ceil() as usize).max(1) - 1];
        let n = s.n.max(1) as f64;
        line(format!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.2} ms | {:.2} ms |",
            s.r5 / n,
            s.r10 / n,
            s.ndcg / n,
            q(0.5),
            q(0.99)
        ));
    }
    line(format!(
        "\n| {category} | {count} | {} |",
        names
            .iter()
            .map(|m| format!("R@10 {m}"))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    line(format!("|---|---:|{}", "---:|".repeat(names.len())));
    for (c, (_, n)) in &scores[0].by_category {
        let cells: Vec<String> = scores
            .iter()
            .map(|s| {
                let (sum, n) = s.by_category[c];
                format!("{:.3}", sum / n.max(1) as f64)
            })
            .collect();
        line(format!("| {c} | {n} | {} |", cells.join(" | ")));
    }
}
