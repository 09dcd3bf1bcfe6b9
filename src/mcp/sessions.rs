//! Whom each 2025-11-25 HTTP session belongs to: rmcp's local session manager, wrapped so that
//! the caller a session's `initialize` came with (its bearer token's subject, scope and
//! namespaces; nobody on a server without tokens) is recorded when the session is created and
//! forgotten when it closes, however it closes (`DELETE`, expiry, shutdown). A request naming a
//! session of another caller is answered as one naming an unknown session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, GetExtensions, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use crate::mcp::auth::Caller;

/// The caller each live session was opened by.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    by_session: Mutex<HashMap<SessionId, Option<Caller>>>,
}

impl Owners {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Option<Caller>>> {
        // A plain map: consistent whatever panicked while it was held.
        self.by_session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, id: &SessionId, owner: Option<Caller>) {
        self.map().insert(Arc::clone(id), owner);
    }

    fn forget(&self, id: &SessionId) {
        self.map().remove(id);
    }

    /// Whose session `id` is, as seen by `caller`.
    pub(crate) fn whose(&self, id: &str, caller: Option<&Caller>) -> Whose {
        match self.map().get(id) {
            None => Whose::Unknown,
            Some(owner) if owner.as_ref() == caller => Whose::Mine,
            Some(_) => Whose::Another,
        }
    }

    /// Sessions whose owner is recorded.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

/// Whose a session named by a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    /// Opened by the same caller.
    Mine,
    /// Opened by another caller.
    Another,
    /// Not a live session of this server (ended, expired, or never opened).
    Unknown,
}

/// rmcp's in-memory sessions, with their owners.
#[derive(Debug, Default)]
pub(crate) struct OwnedSessions {
    inner: LocalSessionManager,
    owners: Arc<Owners>,
}

impl OwnedSessions {
    /// The owners of this manager's sessions, for the check in front of rmcp.
    pub(crate) fn owners(&self) -> Arc<Owners> {
        Arc::clone(&self.owners)
    }
}

/// The caller of the request a message came in, as `authenticate` recorded it.
fn caller_of(message: &ClientJsonRpcMessage) -> Option<Caller> {
    let extensions = match message {
        JsonRpcMessage::Request(r) => r.request.extensions(),
        JsonRpcMessage::Notification(n) => n.notification.extensions(),
        _ => return None,
    };
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
}

type Inner = LocalSessionManager;

impl SessionManager for OwnedSessions {
    type Error = <Inner as SessionManager>::Error;
    type Transport = <Inner as SessionManager>::Transport;

    fn create_session(
        &self,
    ) -> impl Future<Output = Result<(SessionId, Self::Transport), Self::Error>> + Send {
        self.inner.create_session()
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        // Recorded before the session's id is answered, so no request can name it unrecorded.
        self.owners.record(id, caller_of(&message));
        let answer = self.inner.initialize_session(id, message).await;
        if answer.is_err() {
            self.owners.forget(id);
        }
        answer
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.has_session(id)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.owners.forget(id);
        self.inner.close_session(id).await
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.resume(id, last_event_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Access;
    use crate::mcp::auth::Scope;

    fn caller(subject: &str) -> Caller {
        Caller {
            subject: subject.into(),
            scope: Scope::Read,
            access: Access::All,
        }
    }

    #[tokio::test]
    async fn a_session_admits_its_opener_only_until_it_closes() {
        let sessions = OwnedSessions::default();
        let owners = sessions.owners();
        let (id, _transport) = sessions.create_session().await.unwrap();
        owners.record(&id, Some(caller("alice")));
        assert_eq!(owners.whose(&id, Some(&caller("alice"))), Whose::Mine);
        assert_eq!(owners.whose(&id, Some(&caller("bob"))), Whose::Another);
        assert_eq!(owners.whose(&id, None), Whose::Another);
        let mut wider = caller("alice");
        wider.scope = Scope::Write;
        assert_eq!(
            owners.whose(&id, Some(&wider)),
            Whose::Another,
            "another token of alice"
        );
        assert_eq!(
            owners.whose("unknown", Some(&caller("bob"))),
            Whose::Unknown
        );
        sessions.close_session(&id).await.unwrap();
        assert_eq!(owners.len(), 0, "a closed session is forgotten");
        assert_eq!(owners.whose(&id, Some(&caller("alice"))), Whose::Unknown);
        assert!(!sessions.has_session(&id).await.unwrap());
    }
}
