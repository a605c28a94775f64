//! `parley serve`'s routes in process: the router [`Service::router`] builds, called with
//! tower's `oneshot` (no socket, no binary), over a runtime on the in-process stub with its store
//! in a temporary SQLite file, set up as `parley serve` sets it up. The end-to-end tests
//! (`tests/e2e/serve.rs`) drive the same routes through the binary on a port.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use parley_http::guard::Site;
use parley_runtime::{RunSettings, Runtime};
use parley_serve::{FIELD, Host, ServeOptions, Service};
use parley_store::{SqliteStore, StoreOptions};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The bearer token of the services that want one.
const TOKEN: &str = "s3cret-token-0123456789";

/// A service as `parley serve` starts one (the policy serves the agent alone, each row's
/// sampling is used), on the in-process stub, with its store in a folder of its own.
struct Served {
    router: Router,
    service: Arc<Service>,
    runtime: Arc<Runtime>,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start(options: ServeOptions) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let service = Arc::new(service(&dir, options).await);
        let runtime = Arc::clone(service.runtime());
        Served { router: service.router(), service, runtime, _dir: dir }
    }

    /// One request through the router: the status, the headers and the body.
    async fn call(&self, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts.status, parts.headers, String::from_utf8(body.to_vec()).unwrap())
    }

    /// The service's sessions so far.
    async fn sessions(&self) -> usize {
        self.runtime.store.sessions(self.service.run()).await.unwrap().len()
    }

    async fn stop(self) {
        let Served { router, service, runtime, _dir } = self;
        drop((router, service));
        runtime.stop().await.unwrap();
    }
}

/// A multi-step service as `parley serve` starts one, its store `serve.db` in `dir`.
async fn service(dir: &tempfile::TempDir, options: ServeOptions) -> Service {
    let db = dir.path().join("serve.db");
    let settings: RunSettings = serde_json::from_value(json!({
        "env": "multi-step", "tasks": null, "num_tasks": null, "base_url": null, "model": "parley-stub",
        "api_key_env": null, "concurrency": options.concurrency, "endpoint_concurrency": 8, "trials": 1,
        "db": db, "out": null, "max_steps": 10, "max_errors": 5, "session_timeout_secs": 60.0,
        "call_timeout_secs": 30.0, "max_retries": 1, "system_prompt": null, "sampling": {}, "raw_calls": false,
        "front": {"sampling_from_row": true, "policy_for_agent_only": true}
    }))
    .unwrap();
    let store = SqliteStore::open(&db, StoreOptions::default()).await.unwrap();
    let runtime = Runtime::start(&settings, store).await.unwrap();
    let run = runtime.create_service_run().await.unwrap();
    Service::new(runtime, run, 0, options)
}

/// What `parley serve --listen 127.0.0.1:PORT` admits and guards with.
fn options() -> ServeOptions {
    ServeOptions {
        concurrency: 4,
        queue: 4,
        token: None,
        site: Site::new([127, 0, 0, 1].into(), Vec::new()),
        policy_url_allow: Vec::new(),
    }
}

/// A request as a trainer's client on this machine sends it.
fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
    let mut request = Request::builder().method(method).uri(path).header(header::HOST, "127.0.0.1:8000");
    if !body.is_empty() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

fn get(path: &str) -> Request<Body> {
    request("GET", path, &[], "")
}

fn post(path: &str, body: &str) -> Request<Body> {
    request("POST", path, &[], body)
}

/// A multi-step task row that the stub answers right (it reports `[0]`), with an id of its own.
fn row() -> Value {
    let mut row = environment_multi_step::generate(1, 0).next().unwrap();
    row["expected_synonym_values"] = json!([0]);
    row["id"] = json!("row-7");
    row
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{body}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_the_root_say_the_service_is_up() {
    let served = Served::start(options()).await;
    let (status, _, body) = served.call(get("/health")).await;
    assert_eq!((status, json(&body)), (StatusCode::OK, json!({"status": "healthy"})));
    let (status, _, body) = served.call(get("/")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "parley serve\n"));
    served.stop().await;
}

/// A task row is played to its end and answered with its verify response: the row's own fields,
/// the trajectory, the reward, and where the session is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_row_is_run_and_answered_with_its_verify_response() {
    let served = Served::start(options()).await;
    let mut sent = row();
    sent["_ng_task_index"] = json!(12);
    let (status, headers, body) = served.call(post("/run", &sent.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let answer = json(&body);
    assert_eq!(answer["id"], "row-7", "the row's fields come back: {answer}");
    assert_eq!(answer["_ng_task_index"], 12, "as the trainer sent it: {answer}");
    assert_eq!(answer["reward"], 1.0, "{answer}");
    let output = answer["response"]["output"].as_array().expect("a Responses object's output");
    assert!(output.iter().any(|item| item["type"] == "function_call"), "the trajectory: {answer}");
    assert_eq!(answer["_parley_run"], served.service.run(), "{answer}");
    let session = answer["_parley_session"].as_i64().expect("the session's id");
    // The session is recorded under the service run, with the reward answered.
    assert_eq!(served.sessions().await, 1);
    let score = served.runtime.store.latest_score(session).await.unwrap();
    assert_eq!(score.map(|r| r.value), Some(1.0));
    served.stop().await;
}

/// A body that is not a task row is answered 400 with what is wrong with it, before any
/// session is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_a_task_row_is_refused_by_name() {
    let served = Served::start(options()).await;
    let mut bad_policy = row();
    bad_policy["policy_base_url"] = json!(7);
    for (body, says) in [
        ("[1, 2]".to_owned(), "the body must be a task row (a JSON object), not [1,2]"),
        ("\"a row\"".to_owned(), "the body must be a task row (a JSON object)"),
        ("{\"responses_create_params\": ".to_owned(), "the body is not JSON"),
        ("{}".to_owned(), "the body is not a NeMo Gym task row: the row has no `responses_create_params`"),
        (json!({"responses_create_params": {"input": 3}}).to_string(), "`responses_create_params.input`"),
        (bad_policy.to_string(), "policy_base_url"),
    ] {
        let (status, headers, answer) = served.call(post("/run", &body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let error = json(&answer)["error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains(says), "{body}: {error}");
    }
    assert_eq!(served.sessions().await, 0, "nothing was recorded");
    served.stop().await;
}

/// With a token, every request must carry it (`Bearer`, the scheme in any case), except the
/// health probe a cluster sends without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_only_health_is_answered() {
    let served = Served::start(ServeOptions { token: Some(TOKEN.into()), ..options() }).await;
    let bearer = format!("Bearer {TOKEN}");
    let lower = format!("bearer {TOKEN}");
    for refused in [
        post("/run", &row().to_string()),
        get("/metrics"),
        get("/"),
        request("GET", "/metrics", &[("authorization", "Bearer wrong-token-0123456789")], ""),
        request("GET", "/metrics", &[("authorization", TOKEN)], ""),
    ] {
        let path = refused.uri().to_string();
        let (status, headers, _) = served.call(refused).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer", "{path}");
    }
    assert_eq!(served.call(get("/health")).await.0, StatusCode::OK);
    assert_eq!(served.call(request("GET", "/metrics", &[("authorization", &lower)], "")).await.0, StatusCode::OK);
    let (status, _, body) =
        served.call(request("POST", "/run", &[("authorization", &bearer)], &row().to_string())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(served.sessions().await, 1, "only the request with the token ran");
    served.stop().await;
}

/// A page of another site, and a name that is not this machine's (DNS rebinding), are refused
/// before anything runs; the service's own pages and the origins it was told to trust are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_or_host_is_refused() {
    let site = Site::new([127, 0, 0, 1].into(), vec!["https://trainer.example/".into()]);
    let served = Served::start(ServeOptions { site, ..options() }).await;
    let body = row().to_string();
    for (headers, says) in [
        (vec![("origin", "https://evil.example")], "--allow-origin https://evil.example"),
        (vec![("origin", "null")], "--allow-origin null"),
        (vec![("host", "evil.example")], "`Host: evil.example` is not this machine's name"),
    ] {
        let mut refused = request("POST", "/run", &[], &body);
        for (name, value) in &headers {
            refused.headers_mut().insert(*name, value.parse().unwrap());
        }
        let (status, _, answer) = served.call(refused).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}: {answer}");
        let error = json(&answer)["error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains(says), "{headers:?}: {error}");
    }
    assert_eq!(served.sessions().await, 0, "nothing ran");
    for origin in ["http://127.0.0.1:8000", "https://trainer.example", "HTTPS://TRAINER.EXAMPLE"] {
        let (status, _, _) = served.call(request("GET", "/", &[("origin", origin)], "")).await;
        assert_eq!(status, StatusCode::OK, "{origin}");
    }
    served.stop().await;
}

/// With every slot held and no queue, a row is answered 503 at once with `Retry-After`, and
/// counted; the row holding the slot is answered as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_service_answers_503_with_retry_after() {
    let served = Served::start(ServeOptions { concurrency: 1, queue: 0, ..options() }).await;
    let body = row().to_string();
    // Polled in order on this task: the first takes the only slot and waits on its session
    // before the second is polled.
    let (first, second) = tokio::join!(served.call(post("/run", &body)), served.call(post("/run", &body)));
    assert_eq!(first.0, StatusCode::OK, "{}", first.2);
    let (status, headers, answer) = second;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(headers[header::RETRY_AFTER], "1");
    assert!(json(&answer)["error"].as_str().unwrap().contains("every slot and the queue are full"), "{answer}");
    assert_eq!(served.sessions().await, 1, "the refused row was not recorded");
    let (_, _, metrics) = served.call(get("/metrics")).await;
    assert!(metrics.lines().any(|l| l == "parley_requests_refused_total 1"), "{metrics}");
    // The slot is free again.
    assert_eq!(served.call(post("/run", &body)).await.0, StatusCode::OK);
    served.stop().await;
}

/// `/metrics` is Prometheus's text format: every sample is of a family with its help and type,
/// and the sessions played are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text_and_count_the_sessions() {
    let served = Served::start(options()).await;
    for _ in 0..2 {
        assert_eq!(served.call(post("/run", &row().to_string())).await.0, StatusCode::OK);
    }
    let (status, headers, metrics) = served.call(get("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/plain; version=0.0.4");
    let mut families = std::collections::BTreeMap::new();
    let mut samples = std::collections::BTreeMap::new();
    for line in metrics.lines() {
        if let Some(help) = line.strip_prefix("# HELP ") {
            let (name, text) = help.split_once(' ').unwrap();
            assert!(!text.is_empty(), "{line}");
            families.entry(name.to_owned()).or_insert((false, None)).0 = true;
        } else if let Some(kind) = line.strip_prefix("# TYPE ") {
            let (name, kind) = kind.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            families.entry(name.to_owned()).or_insert((false, None)).1 = Some(kind.to_owned());
        } else {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample: {line}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number: {line}"));
            let name = series.split('{').next().unwrap();
            assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{line}");
            let family = families
                .keys()
                .find(|f| name == f.as_str() || ["_bucket", "_sum", "_count"].iter().any(|s| name == format!("{f}{s}")))
                .unwrap_or_else(|| panic!("{name} follows its family's # HELP and # TYPE"));
            let (help, kind) = &families[family];
            assert!(*help && kind.is_some(), "{family} has its help and type");
            samples.insert(series.to_owned(), value);
        }
    }
    assert_eq!(samples["parley_sessions_finished_total{termination=\"agent_stop\",failure=\"\"}"], 2.0, "{metrics}");
    assert_eq!(samples["parley_run_seconds_count"], 2.0, "{metrics}");
    assert_eq!(samples["parley_run_seconds_bucket{le=\"+Inf\"}"], 2.0, "{metrics}");
    assert_eq!(samples["parley_sessions_in_flight"], 0.0, "{metrics}");
    assert!(samples["parley_model_call_seconds_count{party=\"agent\"}"] >= 2.0, "{metrics}");
    assert!(samples["parley_store_commit_seconds_count"] >= 2.0, "{metrics}");
    served.stop().await;
}

/// Two environments behind one host, as `parley serve` with an `[[environment]]` table hosts
/// them: a row goes to the one it names (by `environment` or `agent_ref.name`), the default when
/// it names none, and a name the host does not know is a 400 listing those it does; each
/// environment's sessions land in its own service run, and `/metrics` labels every sample with
/// its environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_environments_route_rows_by_name_and_label_their_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let stop = parley_runtime::Stop::default();
    let first = service(&dir, options()).await.named("default").with_stop(stop.clone());
    let second = service(&dir, options()).await.named("math").with_stop(stop.clone());
    let host = Arc::new(Host::new(vec![Arc::new(first), Arc::new(second)], Some((8, 8))));
    let router = host.router();
    let call = |body: Value| {
        let router = router.clone();
        async move {
            let response = router.oneshot(post("/run", &body.to_string())).await.unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            (status, json(std::str::from_utf8(&body).unwrap()))
        }
    };
    let runs: Vec<i64> = host.hosted().iter().map(|s| s.run()).collect();
    let mut by_field = row();
    by_field[FIELD] = json!("math");
    let mut by_agent = row();
    by_agent["agent_ref"] = json!({"type": "responses_api_agents", "name": "math"});
    for (sent, environment, run) in
        [(row(), "default", runs[0]), (by_field, "math", runs[1]), (by_agent, "math", runs[1])]
    {
        let (status, answer) = call(sent).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(
            (answer["_parley_environment"].as_str(), answer["_parley_run"].as_i64()),
            (Some(environment), Some(run))
        );
        assert_eq!(answer["reward"], 1.0, "{answer}");
    }
    let mut unknown = row();
    unknown[FIELD] = json!("chess");
    let (status, answer) = call(unknown).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("`chess`") && error.contains("`default`, `math`"), "{error}");

    let response = router.clone().oneshot(get("/metrics")).await.unwrap();
    let metrics = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let metrics = String::from_utf8(metrics.to_vec()).unwrap();
    for (environment, n) in [("default", 1), ("math", 2)] {
        let line = format!(
            "parley_sessions_finished_total{{environment=\"{environment}\",termination=\"agent_stop\",failure=\"\"}} {n}"
        );
        assert!(metrics.lines().any(|l| l == line), "{line}: {metrics}");
        let count = format!("parley_run_seconds_count{{environment=\"{environment}\"}} {n}");
        assert!(metrics.lines().any(|l| l == count), "{count}: {metrics}");
    }
    assert_eq!(metrics.matches("# TYPE parley_run_seconds histogram").count(), 1, "each family once: {metrics}");
    assert!(metrics.lines().any(|l| l == "parley_requests_refused_total{environment=\"\"} 0"), "{metrics}");
    let runtimes: Vec<Arc<Runtime>> = host.hosted().iter().map(|s| Arc::clone(s.runtime())).collect();
    drop((router, host));
    for runtime in runtimes {
        runtime.stop().await.unwrap();
    }
}
