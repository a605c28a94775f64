//! A model served over HTTPS: Parley's calls go over TLS and take the server's certificate only
//! when a root the machine trusts vouches for it.
//!
//! The server is a TLS front for the stub on loopback, with the certificate in `tls/` (for
//! `127.0.0.1` and `localhost`, signed by the test CA `tls/ca.pem`; made with `openssl req` and
//! `openssl x509 -req`, valid until 2126). A `parley` given that CA as the machine's roots
//! (`SSL_CERT_FILE`, which the platform's verifier reads on Linux) completes its run through
//! it; one with the machine's own roots refuses the certificate and names why.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::crash::run_args;
use crate::harness::{Stub, Workdir, ok, read_jsonl, root, text};

/// A TLS server on loopback that hands each connection's plain bytes to `127.0.0.1:to`.
/// Returns its port.
fn tls_front(to: u16) -> u16 {
    let dir = root().join("tests/e2e/tls");
    let chain: Vec<CertificateDer> =
        CertificateDer::pem_file_iter(dir.join("server.pem")).unwrap().collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((socket, _)) = listener.accept().await else { continue };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake: nothing to serve.
                    let Ok(mut tls) = acceptor.accept(socket).await else { return };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
    });
    port
}

#[test]
fn a_model_served_over_https_is_reached_when_a_trusted_root_vouches_for_it() {
    let stub = Stub::start(&[]);
    let https = format!("https://127.0.0.1:{}/v1", tls_front(stub.port()));
    let work = Workdir::new();
    work.tasks(4);
    let run = |db: &str, out: &str, roots: Option<&str>| {
        let mut args = run_args(&https, db, out);
        args.extend(["--max-retries", "0"]);
        match roots {
            Some(ca) => work.parley_with_env(&args, &[("SSL_CERT_FILE", ca), ("SSL_CERT_DIR", "")]),
            None => work.parley_without_env(&args, &["SSL_CERT_FILE", "SSL_CERT_DIR"]),
        }
    };

    let ca = root().join("tests/e2e/tls/ca.pem");
    ok(&run("trusted.db", "trusted.jsonl", Some(ca.to_str().unwrap())));
    let rows = read_jsonl(&work.path("trusted.jsonl"));
    assert_eq!(rows.len(), 4, "every task's rollout came back over TLS");
    let served = stub.stats()["requests"].as_u64().unwrap();
    assert!(served >= 4, "the stub behind the TLS front served the calls ({served})");

    let refused = run("refused.db", "refused.jsonl", None);
    let said = format!("{}{}", text(&refused.stdout), text(&refused.stderr));
    let failures = std::fs::read_to_string(work.path("refused_failures.jsonl")).unwrap_or_default();
    assert_eq!(failures.lines().count(), 4, "every session failed: {said}");
    assert!(
        failures.contains("UnknownIssuer"),
        "each session's failure names the certificate no trusted root vouches for:\n{said}\n{failures}"
    );
    assert_eq!(stub.stats()["requests"].as_u64().unwrap(), served, "no call reached the model past the refusal");
}
