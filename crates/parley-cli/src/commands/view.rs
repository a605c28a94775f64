//! `parley view`: serves the web viewer of a database until SIGINT or SIGTERM. Where it may
//! listen and with which token is checked before the database is opened or a port bound.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use parley_view::Access;

use crate::cli::ViewArgs;
use crate::commands::inspect::open;
use crate::error::usage;

/// Who may read, from the flags: open on loopback without a token, the token's holders with
/// one; an address other than loopback without a token is refused.
fn access(listen: SocketAddr, token_env: Option<&str>) -> anyhow::Result<Access> {
    match token_env {
        Some(var) => match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() => match parley_http::guard::weak_token(token.trim()) {
                Some(why) if !listen.ip().is_loopback() => Err(usage(format!("--token-env {var}: {why}"))),
                _ => Ok(Access::token(token.trim())),
            },
            _ => Err(usage(format!("--token-env {var}: the variable is not set, or empty; export {var}=TOKEN first"))),
        },
        None if listen.ip().is_loopback() => Ok(Access::open()),
        None => Err(usage(format!(
            "--listen {listen} is not loopback: anyone who can reach it could read every transcript; pass \
             --token-env VAR with a variable that holds a token, or listen on 127.0.0.1"
        ))),
    }
}

pub async fn view(args: ViewArgs) -> anyhow::Result<()> {
    let site = parley_http::guard::Site::new(args.listen.ip(), args.allow_origin.clone());
    let access = access(args.listen, args.token_env.as_deref())?.at(site);
    let store = open(&args.db.db).await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await.with_context(|| {
        format!("listening on {} (is the port taken? --listen ADDR:0 picks a free one)", args.listen)
    })?;
    let address = listener.local_addr()?;
    // The address alone on stdout's first line, so that a script can read where to go.
    let mut out = std::io::stdout().lock();
    writeln!(out, "http://{address}/")?;
    out.flush()?;
    drop(out);
    eprintln!("serving {} at http://{address}/ (Ctrl-C stops)", args.db.db);
    parley_view::serve(listener, parley_view::router(store.clone(), access), stopped()).await?;
    store.close().await?;
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn stopped() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_loopback_needs_a_token() {
        let anywhere: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert!(access(anywhere, None).is_err());
        assert!(access(local, None).is_ok());
        assert!(access(anywhere, Some("PARLEY_VIEW_TEST_SURELY_UNSET")).is_err());
    }
}
