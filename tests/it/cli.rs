//! The command line as a user meets it, through the real binary: what its
//! error messages say, and how often.

use std::process::Command;

fn rankpulse(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse")).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// An error whose message already quotes its OS error must not also hand
/// it on as its `source()`: main prints the whole chain, and the cause
/// would then be said twice ("…: No such file or directory (os error 2):
/// No such file or directory (os error 2)").
#[test]
fn a_missing_file_says_its_os_error_once() {
    let missing = std::env::temp_dir().join(format!("rankpulse-cli-{}-missing", std::process::id()));
    let missing = missing.to_str().unwrap();
    // "No such file or directory (os error 2)", as the binary will see it.
    let os_error = std::fs::File::open(missing).unwrap_err().to_string();
    for args in
        [vec!["run", "--config", missing], vec!["replay", "--config", missing, missing], vec!["replay", missing]]
    {
        let (code, stderr) = rankpulse(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.matches(&os_error).count(), 1, "{args:?} should say {os_error:?} once: {stderr}");
        assert!(stderr.contains(missing), "{args:?} should name the file: {stderr}");
    }
}

/// An environment override's unknown key says that it came from the
/// environment, and from which variable.
#[test]
fn an_unknown_environment_key_names_its_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["run", "--print-config"])
        .env("RANKPULSE__KAFKA__NOPE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "rankpulse run: environment variable RANKPULSE__KAFKA__NOPE: config key kafka.nope: unknown field"
        ),
        "{stderr}"
    );
}

/// A variable that is not UTF-8 is nothing unusual in an inherited
/// environment: one of someone else's is left alone, one named like an
/// override is an error naming it; neither panics (exit 101).
#[test]
fn an_environment_variable_that_is_not_utf8_is_named_or_left_alone() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let not_utf8 = OsStr::from_bytes(b"caf\xe9");
    for command in [&["run", "--print-config"][..], &["replay", "tests/fixtures/events/small.jsonl"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .args(command)
            .env("SOMEONE_ELSES", not_utf8)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{command:?}: {stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["run", "--print-config"])
        .env("RANKPULSE__SESSION__GAP", not_utf8)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("rankpulse run: environment variable RANKPULSE__SESSION__GAP: is not valid UTF-8"),
        "{stderr}"
    );
}

/// A librdkafka property librdkafka does not know, or a value it refuses,
/// stops `rankpulse run` at start with exit 2 and librdkafka's own words,
/// before any connection is tried.
#[test]
fn a_property_librdkafka_refuses_stops_the_start() {
    let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http = listen.local_addr().unwrap().to_string();
    drop(listen);
    for (var, value, said) in [
        ("RANKPULSE__KAFKA__PROPERTIES__NOT_A_PROPERTY", "1", "not.a.property"),
        ("RANKPULSE__KAFKA__PROPERTIES__SECURITY_PROTOCOL", "carrier_pigeon", "security.protocol"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .arg("run")
            .env("RANKPULSE__KAFKA__BROKERS", "127.0.0.1:9")
            .env("RANKPULSE__HTTP__LISTEN", &http)
            .env(var, value)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {stderr}");
        assert!(stderr.contains(said), "{var}: {stderr}");
    }
}

/// `state.dir` naming a file says so, not the OS's "File exists".
#[test]
fn a_state_dir_that_is_a_file_says_so() {
    let file = std::env::temp_dir().join(format!("rankpulse-cli-{}-state-file", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .arg("run")
        .env("RANKPULSE__STATE__DIR", &file)
        .env("RANKPULSE__HTTP__LISTEN", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("state.dir {}: is a file, not a directory", file.display())), "{stderr}");
}

/// A one-connection HTTP server on loopback: reads the request head, then
/// answers `answer` (or nothing, holding the connection until the client
/// gives up). Returns its port and, once joined, the request it read.
fn one_answer(answer: Option<&'static str>) -> (u16, std::thread::JoinHandle<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
            request.push(byte[0]);
        }
        match answer {
            Some(answer) => stream.write_all(answer.as_bytes()).unwrap(),
            // Until the client closes its end (its timeout): EOF.
            None => while stream.read(&mut byte).is_ok_and(|n| n > 0) {},
        }
        String::from_utf8(request).unwrap()
    });
    (port, server)
}

/// Runs `rankpulse healthcheck --url URL EXTRA…`: exit code, stdout and
/// stderr, having checked that it said one line, on one of them.
fn healthcheck(url: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_rankpulse")).args(["healthcheck", "--url", url]).args(extra).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().count() + stderr.lines().count(), 1, "one line: {stdout}{stderr}");
    (out.status.code(), stdout.into_owned(), stderr.into_owned())
}

/// 200: exit 0, with a plain HTTP/1.1 GET of the URL's path.
#[test]
fn healthcheck_passes_on_200() {
    let (port, server) = one_answer(Some("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"));
    let url = format!("http://127.0.0.1:{port}/healthz");
    let (code, out, err) = healthcheck(&url, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("rankpulse healthcheck: {url}: HTTP/1.1 200 OK\n"));
    let request = server.join().unwrap();
    assert!(request.starts_with("GET /healthz HTTP/1.1\r\n"), "{request}");
    assert!(request.contains(&format!("\r\nHost: 127.0.0.1:{port}\r\n")), "{request}");
}

/// Anything but 200 (an error status, a closed port, silence, not HTTP,
/// not a URL): exit 1 with one line saying why.
#[test]
fn healthcheck_fails_on_anything_else() {
    let (port, server) = one_answer(Some("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"));
    let (code, out, err) = healthcheck(&format!("http://127.0.0.1:{port}/healthz"), &[]);
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.ends_with("answered \"HTTP/1.1 503 Service Unavailable\", not 200\n"), "{err}");
    server.join().unwrap();

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (code, _, err) = healthcheck(&format!("http://127.0.0.1:{closed}/healthz"), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("cannot connect to 127.0.0.1:{closed}: ")), "{err}");

    let (port, server) = one_answer(None);
    let (code, _, err) = healthcheck(&format!("http://127.0.0.1:{port}/healthz"), &["--timeout", "300ms"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.ends_with("/healthz: no answer within 300ms\n"), "{err}");
    server.join().unwrap();

    let (port, server) = one_answer(Some("SSH-2.0-OpenSSH_9.2\r\n"));
    let (code, _, err) = healthcheck(&format!("http://127.0.0.1:{port}/"), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the answer is not HTTP: \"SSH-2.0-OpenSSH_9.2\""), "{err}");
    server.join().unwrap();

    let (code, _, err) = healthcheck("https://127.0.0.1:9464/healthz", &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err, "rankpulse healthcheck: \"https://127.0.0.1:9464/healthz\" is not an http://HOST:PORT/PATH URL\n");
}

/// The image's health check runs the binary itself, in exec form (its
/// /bin/sh is dash, without /dev/tcp), on the port the image listens on.
#[test]
fn the_images_health_check_is_rankpulse_healthcheck() {
    let dockerfile =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/Dockerfile")).unwrap();
    let check = dockerfile.lines().find(|l| l.starts_with("HEALTHCHECK")).expect("a HEALTHCHECK");
    let exec = check.split_once(" CMD ").map(|(_, cmd)| cmd).expect("HEALTHCHECK … CMD");
    assert!(exec.starts_with(r#"["rankpulse", "healthcheck""#), "{check}");
    // The image listens where its own file's sed line puts it: the
    // replacement of `s/^listen = "…"$/listen = "ADDR"/`.
    let listen = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("RUN sed -i 's/^listen = "))
        .find_map(|l| l.split("/listen = \"").nth(1)?.split('"').next())
        .expect("a sed line setting the image's http.listen");
    let port = listen.rsplit_once(':').unwrap().1;
    // An environment variable would override a file mounted over the image's.
    assert!(!dockerfile.lines().any(|l| l.starts_with("ENV RANKPULSE__")), "{dockerfile}");
    assert!(exec.contains(&format!(r#""http://127.0.0.1:{port}/healthz""#)), "{check} vs listen {listen}");
}

/// `run --print-config` prints the effective configuration, environment
/// included, as a file `--config` reads back to the same configuration,
/// with secrets redacted.
#[test]
fn print_config_shows_the_effective_config_and_reads_back() {
    let print = |config: Option<&str>, env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rankpulse"));
        command.args(["run", "--print-config"]);
        if let Some(path) = config {
            command.args(["--config", path]);
        }
        let out = command.envs(env.iter().copied()).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let secret = print(None, &[("RANKPULSE__KAFKA__PROPERTIES__SASL_PASSWORD", "hunter2")]);
    assert!(!secret.contains("hunter2"), "{secret}");
    assert!(secret.contains(r#""sasl.password" = "<redacted>""#), "{secret}");

    let env = [("RANKPULSE__SESSION__GAP", "45s"), ("RANKPULSE__LATE__POLICY", "drop")];
    let printed = print(None, &env);
    assert!(printed.contains("[session]\ngap = \"45s\"\n"), "{printed}");
    assert!(printed.contains("[late]\npolicy = \"drop\"\n"), "{printed}");
    assert_ne!(printed, print(None, &[]), "the environment changed nothing");
    let path = std::env::temp_dir().join(format!("rankpulse-cli-{}-printed.toml", std::process::id()));
    std::fs::write(&path, &printed).unwrap();
    let again = print(Some(path.to_str().unwrap()), &[]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(again, printed);
}

/// `rankpulse loadgen` towards a port where no broker listens: nothing is
/// delivered, and it says so and fails, rather than reporting the lists
/// it generated as produced.
#[test]
fn loadgen_without_a_broker_fails_saying_nothing_was_delivered() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let brokers = format!("127.0.0.1:{port}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["loadgen", "--brokers", &brokers, "--rate", "20", "--duration", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("messages not delivered to {brokers}")), "{err}");
    assert!(err.contains(": 0 messages delivered"), "{err}");
    assert!(err.contains("is the broker reachable?"), "{err}");
}
