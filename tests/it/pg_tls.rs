//! TLS to PostgreSQL (feature `tls`): a cluster that accepts TLS connections only, with a
//! certificate from a CA made for the test. `sslmode=require` with that CA as `sslrootcert`
//! connects; without TLS the server refuses; with another CA the client refuses the server.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::support::BIN;

/// `openssl` with `args` in `dir`; false when it is not installed.
fn openssl(dir: &Path, args: &[&str]) -> bool {
    match Command::new("openssl").args(args).current_dir(dir).output() {
        Ok(out) => {
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            true
        }
        Err(_) => false,
    }
}

/// A CA named `name` in `dir`: `name.pem` and `name.key`.
fn make_ca(dir: &Path, name: &str) -> bool {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    )
}

fn stats(url: &str, index: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(["stats", "--db", url, "--index-dir"])
        .arg(index)
        .env_remove("MNEMOGRAPH_DB")
        .output()
        .expect("run mnemograph stats")
}

#[test]
fn postgres_over_tls_verifies_the_server_against_sslrootcert() {
    let test = "postgres_over_tls";
    let Some(own) = crate::pg::own_cluster(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    if !make_ca(d, "ca") {
        // Past the test harness's capture, as the PostgreSQL skips are.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: openssl is not installed"
        );
        return;
    }
    assert!(make_ca(d, "other"));
    std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    assert!(openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    ));
    assert!(openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    ));
    let db = own.database(test);
    own.put_file("server.crt", &std::fs::read(d.join("server.pem")).unwrap());
    own.put_file("server.key", &std::fs::read(d.join("server.key")).unwrap());
    own.put_file(
        "pg_hba.conf",
        b"local all all trust\nhostssl all all 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 reject\n",
    );
    own.configure("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'");
    own.restart();

    let index = d.join("index");
    let ca = d.join("ca.pem");
    let secure = format!("{db}?sslmode=require&sslrootcert={}", ca.display());
    let out = stats(&secure, &index);
    assert!(
        out.status.success(),
        "over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("memories"));

    let out = stats(&format!("{db}?sslmode=disable"), &index);
    assert!(
        !out.status.success(),
        "the server takes TLS connections only"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cannot connect to PostgreSQL"), "{said}");

    let other = d.join("other.pem");
    let out = stats(
        &format!("{db}?sslmode=require&sslrootcert={}", other.display()),
        &index,
    );
    assert!(
        !out.status.success(),
        "a server the CA did not sign is refused"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cannot connect to PostgreSQL"), "{said}");
}
