//! Namespace access: the namespaces a caller may read and write. On stdio, and for a token
//! without limits, that is every namespace; a token limited to some namespaces meets an error
//! (never an empty answer) when it names another, and walks, expansions and listings stop at
//! the border of its namespaces.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::NamespaceScope;
use crate::store::memories;

/// Which namespaces a caller may use.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Access {
    /// Every namespace.
    #[default]
    All,
    /// These namespaces only (sorted, without repeats).
    Only(Vec<String>),
}

impl Access {
    /// Access to `namespaces` only.
    pub fn only(namespaces: impl IntoIterator<Item = String>) -> Access {
        let mut list: Vec<String> = namespaces.into_iter().collect();
        list.sort();
        list.dedup();
        Access::Only(list)
    }

    /// True when the caller may use every namespace.
    pub fn is_all(&self) -> bool {
        matches!(self, Access::All)
    }

    /// True when the caller may use `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Access::All => true,
            Access::Only(list) => list.binary_search_by(|n| n.as_str().cmp(namespace)).is_ok(),
        }
    }

    /// The namespaces a limited caller may use, comma-separated (for messages).
    fn listed(&self) -> String {
        match self {
            Access::All => "every namespace".into(),
            Access::Only(list) if list.is_empty() => "no namespace".into(),
            Access::Only(list) => list.join(", "),
        }
    }

    /// The error for `namespace`, named by `field`, outside this access.
    pub fn refusal(&self, field: &str, namespace: &str) -> Error {
        Error::Forbidden {
            field: field.to_owned(),
            reason: format!("names namespace {namespace:?}, which this caller may not use"),
            hint: format!(
                "use one of the namespaces this token is for ({}), or ask the server's operator for a token for {namespace:?}",
                self.listed()
            ),
        }
    }

    /// An error when `namespace` is outside this access.
    pub fn check(&self, field: &str, namespace: &str) -> Result<()> {
        if self.allows(namespace) {
            Ok(())
        } else {
            Err(self.refusal(field, namespace))
        }
    }

    /// The namespaces a read asked for, within this access: every allowed one when it asked
    /// for all, an error when it named one outside.
    pub fn narrow(&self, field: &str, scope: NamespaceScope) -> Result<NamespaceScope> {
        match (self, scope) {
            (Access::All, scope) => Ok(scope),
            (Access::Only(list), NamespaceScope::All) => Ok(NamespaceScope::Only(list.clone())),
            (Access::Only(_), NamespaceScope::Only(asked)) => {
                for ns in &asked {
                    self.check(field, ns)?;
                }
                Ok(NamespaceScope::Only(asked))
            }
        }
    }

    /// [`Access::narrow`] for a list where `None` means every namespace.
    pub fn narrow_list(
        &self,
        field: &str,
        asked: Option<Vec<String>>,
    ) -> Result<Option<Vec<String>>> {
        let scope = asked.map_or(NamespaceScope::All, NamespaceScope::Only);
        Ok(match self.narrow(field, scope)? {
            NamespaceScope::All => None,
            NamespaceScope::Only(list) => Some(list),
        })
    }

    /// True when this allows every namespace `other` does.
    pub fn covers(&self, other: &Access) -> bool {
        match (self, other) {
            (Access::All, _) => true,
            (Access::Only(_), Access::All) => false,
            (Access::Only(_), Access::Only(theirs)) => theirs.iter().all(|ns| self.allows(ns)),
        }
    }

    /// The form kept in a task's arguments (`None` for every namespace), so a task adopted by
    /// another process keeps its caller's limits.
    pub fn to_json(&self) -> Option<Value> {
        match self {
            Access::All => None,
            Access::Only(list) => Some(Value::from(list.clone())),
        }
    }

    /// Reads what [`Access::to_json`] wrote; absent is every namespace, anything else that is
    /// not a list of names allows none.
    pub fn from_json(v: Option<&Value>) -> Access {
        match v {
            None | Some(Value::Null) => Access::All,
            Some(Value::Array(items)) => {
                Access::only(items.iter().filter_map(|i| i.as_str().map(str::to_owned)))
            }
            Some(_) => Access::Only(Vec::new()),
        }
    }
}

/// What a caller may do; each scope includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Recall, get, walk, export, task status.
    Read,
    /// Also remember, relate, update, forget, restore, import.
    Write,
    /// Also consolidation runs.
    Admin,
}

impl Scope {
    /// The scope a name (`read`, `write`, `admin`) stands for.
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "read" => Some(Scope::Read),
            "write" => Some(Scope::Write),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

/// The rights a call was made with: its scope and namespaces. A task keeps the grant that
/// started it, and is seen only by callers whose grant covers it, so a token limited to one
/// namespace never reads what the same subject started with a wider token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub scope: Scope,
    pub access: Access,
}

impl Grant {
    /// Every right: the local user on stdio, the server's own schedule, an operator.
    pub fn full() -> Grant {
        Grant {
            scope: Scope::Admin,
            access: Access::All,
        }
    }

    /// True when this grant allows all that `other` does: the same or a wider scope, and
    /// every namespace of `other`.
    pub fn covers(&self, other: &Grant) -> bool {
        self.scope >= other.scope && self.access.covers(&other.access)
    }

    /// The form a task row keeps.
    pub fn to_json(&self) -> Value {
        serde_json::json!({"scope": self.scope.name(), "namespaces": self.access.to_json()})
    }

    /// Reads what [`Grant::to_json`] wrote. A row without a grant (written before grants were
    /// kept) or with one that does not read counts as [`Grant::full`]: only a caller with
    /// every right sees it.
    pub fn from_json(v: Option<&Value>) -> Grant {
        let Some(Value::Object(o)) = v else {
            return Grant::full();
        };
        match o
            .get("scope")
            .and_then(Value::as_str)
            .and_then(Scope::parse)
        {
            Some(scope) => Grant {
                scope,
                access: Access::from_json(o.get("namespaces")),
            },
            None => Grant::full(),
        }
    }
}

/// The memories a limited caller's walk may step on (`None`: every one).
pub(crate) type Within = Option<Arc<HashSet<i64>>>;

impl Engine {
    /// The keys of the memories in the namespaces of `access`, for walks that must not leave
    /// them; `None` when every namespace is allowed.
    pub(crate) fn within(&self, access: &Access) -> Result<Within> {
        match access {
            Access::All => Ok(None),
            Access::Only(list) => {
                let keys = self.store.read(|c| memories::keys_in(c, list))?;
                Ok(Some(Arc::new(keys.into_iter().map(|k| k.0).collect())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limited_caller_reads_its_namespaces_and_is_told_of_the_others() {
        let a = Access::only(["b".to_owned(), "a".to_owned(), "b".to_owned()]);
        assert_eq!(a, Access::Only(vec!["a".into(), "b".into()]));
        assert!(a.allows("a") && !a.allows("c"));
        assert_eq!(
            a.narrow("namespace", NamespaceScope::All).unwrap(),
            NamespaceScope::Only(vec!["a".into(), "b".into()])
        );
        let err = a
            .narrow(
                "namespaces",
                NamespaceScope::Only(vec!["a".into(), "c".into()]),
            )
            .unwrap_err();
        assert!(err.is_user_error());
        let text = err.to_string();
        assert!(text.contains("\"c\"") && text.contains("a, b"), "{text}");
        assert_eq!(Access::All.narrow_list("namespaces", None).unwrap(), None);
        assert_eq!(Access::from_json(a.to_json().as_ref()), a);
        assert_eq!(Access::from_json(None), Access::All);
        assert_eq!(
            Access::from_json(Some(&serde_json::json!("a"))),
            Access::Only(vec![])
        );
    }

    #[test]
    fn a_grant_covers_the_same_or_narrower_rights_only() {
        let grant = |scope, ns: &[&str]| Grant {
            scope,
            access: if ns == ["*"] {
                Access::All
            } else {
                Access::only(ns.iter().map(|n| (*n).to_owned()))
            },
        };
        let wide = grant(Scope::Admin, &["*"]);
        let a_read = grant(Scope::Read, &["a"]);
        let ab_write = grant(Scope::Write, &["a", "b"]);
        assert!(wide.covers(&a_read) && wide.covers(&ab_write) && wide.covers(&wide));
        assert!(ab_write.covers(&a_read) && a_read.covers(&a_read));
        assert!(!a_read.covers(&wide), "fewer namespaces");
        assert!(
            !a_read.covers(&ab_write),
            "fewer namespaces and a lower scope"
        );
        assert!(
            !grant(Scope::Read, &["a", "b"]).covers(&ab_write),
            "a lower scope"
        );
        assert!(
            !grant(Scope::Admin, &["a", "b"]).covers(&wide),
            "every namespace"
        );
        for g in [&wide, &a_read, &ab_write] {
            assert_eq!(&Grant::from_json(Some(&g.to_json())), g);
        }
        assert_eq!(Grant::from_json(None), Grant::full(), "rows of before");
        assert_eq!(
            Grant::from_json(Some(&serde_json::json!({"scope": "root"}))),
            Grant::full()
        );
    }

    use crate::config::Config;
    use crate::engine::control::Progressing;
    use crate::engine::traverse::{Shape, TraverseRequest};
    use crate::engine::{Link, RelateItem, RememberItem};
    use crate::error::Error;
    use crate::graph::Direction;
    use crate::model::MemoryRef;

    fn note(ns: &str, content: &str, links: Vec<Link>) -> RememberItem {
        RememberItem {
            content: content.into(),
            namespace: Some(ns.into()),
            links,
            ..RememberItem::default()
        }
    }

    fn link(to: &str) -> Vec<Link> {
        vec![Link {
            to: to.into(),
            kind: "about".into(),
            weight: None,
        }]
    }

    fn forbidden<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(e @ Error::Forbidden { .. }) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// The answer to a reference to `id`, a memory outside the caller's namespaces, must be
    /// the answer to a memory that exists nowhere (`nowhere` is the same call for one).
    fn hidden<T: std::fmt::Debug>(r: Result<T>, id: &str, nowhere: Result<T>) {
        let (Err(e @ Error::NotFound { .. }), Err(n @ Error::NotFound { .. })) = (&r, &nowhere)
        else {
            panic!("expected not found for both, got {r:?} and {nowhere:?}");
        };
        assert_eq!(e.to_string().replace(id, "m_nowhere"), n.to_string());
    }

    /// A chain work:a → home:b → work:c, and a caller limited to `work`.
    #[test]
    fn a_caller_limited_to_a_namespace_neither_reads_nor_writes_nor_walks_outside_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(Config::for_db(dir.path().join("m.db"))).unwrap();
        let ids: Vec<String> = e
            .remember(&[
                note("work", "alpha report due friday", vec![]),
                note("home", "bravo dentist on monday", vec![]),
            ])
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().id)
            .collect();
        let (a, b) = (ids[0].clone(), ids[1].clone());
        let c = e
            .remember(&[note("work", "charlie budget", link(&b))])
            .unwrap()[0]
            .as_ref()
            .unwrap()
            .id
            .clone();
        e.relate(&[RelateItem {
            from: a.clone(),
            to: b.clone(),
            kind: "next".into(),
            weight: None,
            metadata: None,
            namespace: None,
        }])
        .unwrap()[0]
            .as_ref()
            .unwrap();
        let work = Access::only(["work".to_owned()]);

        // Writes: an item for another namespace, or linked there, fails alone.
        let mut rs = e
            .remember_in(
                &[
                    note("home", "delta", vec![]),
                    note("work", "echo", link(&b)),
                    note("work", "foxtrot", link(&a)),
                ],
                &work,
            )
            .unwrap();
        let nowhere = e
            .remember_in(
                &[
                    note("home", "golf", vec![]),
                    note("work", "hotel", link("m_nowhere")),
                ],
                &work,
            )
            .unwrap()
            .pop()
            .unwrap();
        assert!(rs.pop().unwrap().is_ok());
        hidden(rs.pop().unwrap(), &b, nowhere);
        assert!(forbidden(rs.pop().unwrap()).contains("\"home\""));
        let rel = |to: &str| RelateItem {
            from: a.clone(),
            to: to.into(),
            kind: "x".into(),
            weight: None,
            metadata: None,
            namespace: None,
        };
        let mut rs = e.relate_in(&[rel(&c), rel(&b)], &work).unwrap();
        let nowhere = e
            .relate_in(&[rel(&c), rel("m_nowhere")], &work)
            .unwrap()
            .pop()
            .unwrap();
        hidden(rs.pop().unwrap(), &b, nowhere);
        assert!(rs.pop().unwrap().is_ok());
        let patch = crate::model::MemoryPatch {
            importance: Some(0.9),
            ..Default::default()
        };
        let nowhere = MemoryRef::Id("m_nowhere".into());
        hidden(
            e.update_in(&MemoryRef::Id(b.clone()), &patch, "t", &work),
            &b,
            e.update_in(&nowhere, &patch, "t", &work),
        );
        hidden(
            e.forget_or_restore_in(&[MemoryRef::Id(b.clone())], &[], "t", true, &work),
            &b,
            e.forget_or_restore_in(std::slice::from_ref(&nowhere), &[], "t", true, &work),
        );
        assert!(
            e.get(&[MemoryRef::Id(b.clone())], false).unwrap()[0]
                .memory
                .deleted_at
                .is_none()
        );

        // Reads: a foreign memory is an error; relations to it are left out.
        hidden(
            e.get_in(&[MemoryRef::Id(b.clone())], false, &work),
            &b,
            e.get_in(std::slice::from_ref(&nowhere), false, &work),
        );
        // By name in a namespace it may not read: as a name that exists nowhere.
        let named = |name: &str| MemoryRef::Name {
            namespace: "home".into(),
            name: name.into(),
        };
        e.remember(&[RememberItem {
            name: Some("dentist".into()),
            ..note("home", "the dentist", vec![])
        }])
        .unwrap()[0]
            .as_ref()
            .unwrap();
        hidden(
            e.get_in(&[named("dentist")], false, &work),
            "dentist",
            e.get_in(&[named("m_nowhere")], false, &work),
        );
        let got = e.get_in(&[MemoryRef::Id(a.clone())], false, &work).unwrap();
        assert!(got[0].relations.iter().all(|r| r.to != b && r.from != b));
        assert!(!got[0].relations.is_empty());
        assert!(
            e.get(&[MemoryRef::Id(a.clone())], false).unwrap()[0]
                .relations
                .iter()
                .any(|r| r.to == b)
        );
        let stats = e.stats_in(&work).unwrap();
        assert_eq!(stats.memories, 3);
        assert_eq!(stats.by_namespace, vec![("work".to_owned(), 3)]);
        assert_eq!(stats.relations, 2, "a→c and foxtrot→a, not a→b or c→b");

        // Walks stop at the border: b is not stepped on, so d, reached only through it, is not.
        let d = e.remember(&[note("work", "delta plan", link(&b))]).unwrap()[0]
            .as_ref()
            .unwrap()
            .id
            .clone();
        let walk = |access: &Access, seed: &str| TraverseRequest {
            seeds: vec![MemoryRef::Id(seed.into())],
            query: None,
            namespaces: NamespaceScope::All,
            depth: 3,
            direction: Direction::Both,
            kinds: vec![],
            min_weight: 0.0,
            valid_at: None,
            max_nodes: 100,
            shape: Shape::Nodes,
            focus: None,
            limit: 50,
            include_archived: false,
            access: access.clone(),
        };
        let ctl = Progressing::default();
        let all = e.traverse(&walk(&Access::All, &c), &ctl).unwrap();
        assert!(all.nodes.iter().any(|n| n.memory.id == d));
        let limited = e.traverse(&walk(&work, &c), &ctl).unwrap();
        assert!(limited.nodes.iter().all(|n| n.memory.namespace == "work"));
        assert!(limited.nodes.iter().any(|n| n.memory.id == a));
        assert!(
            !limited.nodes.iter().any(|n| n.memory.id == d),
            "d lies behind b"
        );
        hidden(
            e.traverse(&walk(&work, &b), &ctl),
            &b,
            e.traverse(&walk(&work, "m_nowhere"), &ctl),
        );
        let spec = |access: &Access| crate::engine::traverse::PathRequest {
            direction: Direction::Both,
            kinds: vec![],
            min_weight: 0.0,
            valid_at: None,
            max_hops: 4,
            access: access.clone(),
        };
        let (rd, rc) = (MemoryRef::Id(d.clone()), MemoryRef::Id(c.clone()));
        let through_b = e
            .find_paths(&rc, &rd, 3, &spec(&Access::All), &ctl)
            .unwrap();
        assert!(!through_b.paths.is_empty());
        assert!(through_b.paths.iter().all(|p| p.ids.contains(&b)));
        let within = e.find_paths(&rc, &rd, 3, &spec(&work), &ctl).unwrap();
        assert!(within.paths.is_empty(), "{within:?}");

        // Imports: a record for another namespace, or a relation to a memory there, is a bad
        // record; the rest is stored.
        let data = format!(
            "{{\"type\":\"memory\",\"id\":\"m_imp1\",\"namespace\":\"work\",\"content\":\"golf\"}}\n\
             {{\"type\":\"memory\",\"id\":\"m_imp2\",\"namespace\":\"home\",\"content\":\"hotel\"}}\n\
             {{\"type\":\"relation\",\"from\":\"m_imp1\",\"to\":\"{b}\",\"kind\":\"k\"}}\n"
        );
        let import = |access: &Access, namespace: Option<&str>| {
            e.import(
                &crate::engine::ImportRequest {
                    source: crate::engine::Source::Inline(data.clone()),
                    format: None,
                    namespace: namespace.map(str::to_owned),
                    dry_run: false,
                    actor: "test".into(),
                    max_records: None,
                    access: access.clone(),
                    job: None,
                },
                &ctl,
            )
        };
        let report = import(&work, None).unwrap();
        assert_eq!((report.memories_added, report.errors), (1, 2), "{report:?}");
        assert!(
            report.first_errors[0].contains("line 2")
                && report.first_errors[0].contains("not allowed"),
            "a record for another namespace: {:?}",
            report.first_errors
        );
        assert!(
            report.first_errors[1].contains("line 3")
                && report.first_errors[1].contains("not found"),
            "a relation to a memory outside: {:?}",
            report.first_errors
        );
        forbidden(import(&work, Some("home")));
        assert_eq!(
            e.stats_in(&Access::only(["home".to_owned()]))
                .unwrap()
                .memories,
            2,
            "bravo and the dentist, nothing imported"
        );
    }
}
