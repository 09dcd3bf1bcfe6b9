//! TLS to PostgreSQL (feature `tls`): rustls with ring over the client's socket. The server's
//! certificate is always verified, against the CA file the URL's `sslrootcert` names, or else the
//! public roots ureq's TLS uses. No channel binding (SCRAM without `-PLUS`).

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::Socket;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{Error, Result};

/// Makes a TLS session per connection, for `postgres::Config::connect`.
#[derive(Clone)]
pub(crate) struct MakeRustls {
    config: Arc<rustls::ClientConfig>,
}

impl MakeRustls {
    /// Trusting the certificates in the PEM file `ca`, or the public roots without one.
    pub(crate) fn new(ca: Option<&Path>) -> Result<MakeRustls> {
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(file) => {
                let bad = |e: &dyn std::fmt::Display| {
                    Error::invalid(
                        "db",
                        format!("sslrootcert {} cannot be read ({e})", file.display()),
                        "name a PEM file holding the certificate of the CA that signed the server's",
                    )
                };
                let certs = CertificateDer::pem_file_iter(file).map_err(|e| bad(&e))?;
                for cert in certs {
                    roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Internal(format!("TLS settings: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(MakeRustls {
            config: Arc::new(config),
        })
    }
}

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = Stream;
    type TlsConnect = Connect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> std::result::Result<Connect, Self::Error> {
        Ok(Connect {
            config: Arc::clone(&self.config),
            name: ServerName::try_from(domain.to_owned())?,
        })
    }
}

/// One TLS handshake.
pub(crate) struct Connect {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for Connect {
    type Stream = Stream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream>> + Send>>;

    fn connect(self, socket: Socket) -> Self::Future {
        Box::pin(async move {
            let stream = tokio_rustls::TlsConnector::from(self.config)
                .connect(self.name, socket)
                .await?;
            Ok(Stream(stream))
        })
    }
}

/// A TLS session over the client's socket.
pub(crate) struct Stream(tokio_rustls::client::TlsStream<Socket>);

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl TlsStream for Stream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
