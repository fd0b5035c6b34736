//! Where a configuration comes from: the built-in defaults, the `--config`
//! file, then `RANKPULSE__SECTION__KEY` variables, merged into one TOML
//! table before it is typed and validated. It owns the merge, the typing
//! of an override by its key, and the blame: an error names the key and the
//! file or variable that set it, and never repeats a secret property's
//! text. It also names the variables that look meant as overrides but are
//! not read.
//!
//! Why the layering is written here and not taken from the `config` crate:
//! tried with `config` 0.15 (file + `Environment::with_prefix("RANKPULSE")`,
//! separator `__`, `try_parsing`, the same `deny_unknown_fields` structs),
//! an unknown key gives the same message whether the file or the
//! environment set it ("unknown field `gapp`, expected `gap` or
//! `max_open_lists` for key `session`"), naming neither the file nor the
//! variable; a bad value says "in the environment" but not which variable;
//! a list needs its key registered beforehand and a separator
//! (`a,b`), so `RANKPULSE__METRICS__CUTOFFS=[1,3,10]` is not TOML there.
//! What this module gives instead ("environment variable
//! RANKPULSE__SESSION__GAPP: config key session.gapp: unknown field …",
//! values typed by their key) is what the tests below hold it to.

use super::{Config, ConfigError, is_secret_property};
use std::path::Path;

/// Prefix of environment overrides; sections and keys are separated by `__`.
pub const ENV_PREFIX: &str = "RANKPULSE__";

impl Config {
    /// Loads defaults, then `path` (if any), then the process environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with_env(path, process_env()?)
    }

    /// As [`Config::load`], with the environment given explicitly (tests).
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|cause| ConfigError::Read { path: path.to_path_buf(), cause })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Syntax { path: path.to_path_buf(), message: syntax_error(&text, &e) })?
            }
            None => toml::Table::new(),
        };
        // Which keys the file set, for errors that name it.
        let from_file = path.map(|path| (path, table.clone()));
        // The built-in defaults tell which keys hold text (see `apply_env`).
        let defaults = toml::Table::try_from(Config::default()).unwrap_or_default();
        // The file is to blame for a key it set, and for a key without a
        // default left out of a section it set (`mapped.time`, required).
        let blame = |key: String, message: String| match &from_file {
            Some((path, file))
                if sets(file, &key)
                    || (!sets(&defaults, &key)
                        && key.rsplit_once('.').is_some_and(|(parent, _)| sets(file, parent))) =>
            {
                ConfigError::FileKey { path: path.to_path_buf(), key, message }
            }
            _ => ConfigError::Key { key, message },
        };
        let mut overrides: Vec<(String, String)> =
            env.into_iter().filter(|(var, _)| var.starts_with(ENV_PREFIX)).collect();
        // A whole table (`RANKPULSE__KAFKA__PROPERTIES='{…}'`) first, then
        // the keys below it, whatever the environment's order: a key set
        // alone is not lost to the table.
        overrides.sort_by_key(|(var, _)| env_path(&var[ENV_PREFIX.len()..]).len());
        for (var, value) in &overrides {
            apply_env(&mut table, &defaults, var, &var[ENV_PREFIX.len()..], value)?;
        }
        let config: Config = deserialize(table).map_err(|(key, message)| {
            // Merged, a key has lost where it came from: an override that
            // is wrong on its own says it is one, and which.
            overrides
                .iter()
                .find_map(|(var, value)| env_key_error(&defaults, var, value))
                .unwrap_or_else(|| blame(key, message))
        })?;
        config.validate().map_err(|e| match e {
            // A bad value an override set is the override's.
            ConfigError::Key { key, message } => match overrides.iter().find(|(var, _)| sets_key(var, &key)) {
                Some((var, _)) => ConfigError::EnvKey { var: var.clone(), key, message },
                None => {
                    // A key nobody set, refused because of another one that
                    // was (a default action above a lowered
                    // metrics.max_grade): the message names that key; say
                    // where it was set.
                    let cause = message
                        .split(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == '.'))
                        .filter(|word| word.contains('.') && !word.starts_with('.') && !word.ends_with('.'))
                        .find_map(|word| {
                            if let Some((var, _)) = overrides.iter().find(|(var, _)| sets_key(var, word)) {
                                Some(format!("{word} is set by environment variable {var}"))
                            } else {
                                let (path, file) = from_file.as_ref()?;
                                sets(file, word).then(|| format!("{word} is set in config file {}", path.display()))
                            }
                        });
                    let file_sets_key = from_file.as_ref().is_some_and(|(_, file)| sets(file, &key));
                    match cause {
                        Some(cause) if !file_sets_key => {
                            ConfigError::Key { key, message: format!("{message}; {cause}") }
                        }
                        _ => blame(key, message),
                    }
                }
            },
            other => other,
        })?;
        Ok(config)
    }
}

/// Sets `RANKPULSE__A__B__C=value` at path a.b.c. Keys are lower-cased
/// (environment variables are conventionally upper case), except below
/// `kafka.properties`, whose keys use dots: `RANKPULSE__KAFKA__PROPERTIES__SASL_MECHANISM`
/// sets `sasl.mechanism`.
/// A key whose default is text takes the value as it is, so that a group id
/// `1234` or an instance name `true` stays text; other keys read it as a
/// TOML value when it is one (numbers, booleans, lists), else as text.
fn apply_env(
    table: &mut toml::Table,
    defaults: &toml::Table,
    var: &str,
    rest: &str,
    value: &str,
) -> Result<(), ConfigError> {
    let parts = env_path(rest);
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::Env { var: var.to_string(), message: "expected RANKPULSE__SECTION__KEY".to_string() });
    }
    // A TOML literal when it is one ("45", "true", "[1, 3]", "\"x\""), else a plain string.
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    // kafka.properties values are strings for librdkafka; the whole table
    // (`RANKPULSE__KAFKA__PROPERTIES='{ "sasl.mechanism" = "PLAIN" }'`) is TOML.
    let properties = parts[0] == "kafka" && parts[1] == "properties";
    let text_key = (properties && parts.len() > 2) || is_text_key(defaults, &parts);
    let parsed = if text_key { toml::Value::String(value.to_string()) } else { parsed };
    // Meant as a list or a table but not TOML ("[1, x]"): taken as text,
    // the key would only say it expected a sequence.
    if let toml::Value::String(text) = &parsed
        && !text_key
        && let Some(open) = text.trim_start().chars().next().filter(|c| matches!(c, '[' | '{'))
        && let Err(e) = format!("v = {value}").parse::<toml::Table>()
    {
        let what = if open == '[' { "an array" } else { "an inline table" };
        // The properties may hold secrets: their text is not repeated.
        let shown = if properties { "the value".to_string() } else { format!("{value:?}") };
        return Err(ConfigError::Env {
            var: var.to_string(),
            message: format!("{shown} is not {what} in TOML: {}", e.message()),
        });
    }
    let mut node = table;
    for part in &parts[..parts.len() - 1] {
        let entry = node.entry(part.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        node = entry
            .as_table_mut()
            .ok_or_else(|| ConfigError::Env { var: var.to_string(), message: format!("{part} is not a section") })?;
    }
    node.insert(parts[parts.len() - 1].clone(), parsed);
    Ok(())
}

/// The key path an override (`RANKPULSE__` left out) sets: sections and
/// keys lower-cased, and below `kafka.properties` one key whose `_` are dots.
fn env_path(rest: &str) -> Vec<String> {
    let parts: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
    if parts.len() >= 3 && parts[0] == "kafka" && parts[1] == "properties" {
        vec!["kafka".into(), "properties".into(), parts[2..].join("__").replace('_', ".")]
    } else {
        parts
    }
}

/// A TOML syntax error as its place and message, without the line itself,
/// which toml's own rendering quotes (it may set a password).
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {}", e.message())
        }
        None => e.message().to_string(),
    }
}

/// The process environment as text. `std::env::vars` panics on a variable
/// that is not UTF-8, and any process may inherit one: such a variable is
/// left out, unless its name is an override's (`RANKPULSE…`), which is an
/// error naming it.
pub fn process_env() -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => vars.push((name, value)),
            (name, _) => {
                let name = name.unwrap_or_else(|n| n.to_string_lossy().into_owned());
                if name.to_ascii_uppercase().starts_with("RANKPULSE") {
                    return Err(ConfigError::Env { var: name, message: "is not valid UTF-8".into() });
                }
            }
        }
    }
    Ok(vars)
}

/// Environment variables that look meant for the configuration but are not
/// read, because only `RANKPULSE__SECTION__KEY` is: one underscore
/// (`RANKPULSE_SESSION_GAP`) or a lower-case prefix (`rankpulse__session__gap`)
/// followed by a section's name. Reported, not refused: a deployment may
/// keep variables of its own under the same prefix (`RANKPULSE_IMAGE`), and
/// only a section's name tells a meant override from those.
pub fn lookalike_overrides(env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let defaults = toml::Table::try_from(Config::default()).unwrap_or_default();
    let mut found: Vec<String> = env
        .into_iter()
        .map(|(var, _)| var)
        .filter(|var| {
            let upper = var.to_ascii_uppercase();
            if var.starts_with(ENV_PREFIX) || !upper.starts_with("RANKPULSE_") {
                return false;
            }
            let rest = upper["RANKPULSE_".len()..].trim_start_matches('_').to_ascii_lowercase();
            // `mapped` has no default, so no key in the defaults.
            defaults.keys().map(String::as_str).chain(["mapped"]).any(|section| {
                rest.strip_prefix(section).is_some_and(|after| after.starts_with('_') || after.is_empty())
            })
        })
        .collect();
    found.sort();
    found
}

/// Whether `table` (a config file's) sets `key` (`session.gap`,
/// `metrics.cutoffs[1]`), a key below it or the section holding it.
/// A key may itself hold dots (`kafka.properties."sasl.mechanism"`,
/// `kafka.formats."search.events"`), so each level tries the rest whole
/// before splitting it.
fn sets(table: &toml::Table, key: &str) -> bool {
    let key = key.trim_start_matches('.');
    if key.is_empty() {
        return true;
    }
    let whole = key.split('[').next().unwrap_or(key);
    if table.contains_key(whole) {
        return true;
    }
    key.match_indices('.').any(|(at, _)| {
        let part = key[..at].split('[').next().unwrap_or(&key[..at]);
        match table.get(part) {
            Some(toml::Value::Table(t)) => sets(t, &key[at + 1..]),
            Some(_) => true,
            None => false,
        }
    })
}

/// Whether the override `var` sets `key` (`mapped.time`), a key below it
/// or the section holding it.
fn sets_key(var: &str, key: &str) -> bool {
    let Some(rest) = var.strip_prefix(ENV_PREFIX) else { return false };
    let path = env_path(rest).join(".");
    let key = key.to_ascii_lowercase();
    path == key || key.starts_with(&format!("{path}.")) || path.starts_with(&format!("{key}."))
}

/// The typed configuration in `table`, or the failing key and why.
fn deserialize(table: toml::Table) -> Result<Config, (String, String)> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let key = e.path().to_string();
        let mut message = e.into_inner().message().to_string();
        // serde quotes the offending text ("invalid type: string \"…\"");
        // under kafka.properties that text may be a password.
        if key == "kafka.properties" || (key.starts_with("kafka.properties.") && is_secret_property(&key)) {
            message = redact_quoted(&message);
        }
        (key, message)
    })
}

/// serde's `invalid type: string "…", expected …` with the string
/// replaced by `<redacted>`; any other message as it is.
fn redact_quoted(message: &str) -> String {
    const OPEN: &str = "string \"";
    const CLOSE: &str = "\", expected";
    match (message.find(OPEN), message.rfind(CLOSE)) {
        (Some(open), Some(close)) if open + OPEN.len() <= close => {
            format!("{}<redacted>{}", &message[..open + OPEN.len()], &message[close..])
        }
        _ => message.to_string(),
    }
}

/// The error of the override `var=value` on the defaults alone, if any.
fn env_key_error(defaults: &toml::Table, var: &str, value: &str) -> Option<ConfigError> {
    let mut table = defaults.clone();
    let rest = var.strip_prefix(ENV_PREFIX)?;
    if let Err(e) = apply_env(&mut table, defaults, var, rest, value) {
        return Some(e);
    }
    let (key, message) = deserialize(table).err()?;
    Some(ConfigError::EnvKey { var: var.to_string(), key, message })
}

/// Whether the built-in default at `path` is text.
fn is_text_key(defaults: &toml::Table, path: &[String]) -> bool {
    let Some((last, sections)) = path.split_last() else { return false };
    let mut node = defaults;
    for section in sections {
        match node.get(section) {
            Some(toml::Value::Table(t)) => node = t,
            _ => return false,
        }
    }
    matches!(node.get(last), Some(toml::Value::String(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{env, from_toml};
    use rankpulse_core::metrics::Gain;
    use std::time::Duration;

    #[test]
    fn variables_that_look_like_overrides_are_named() {
        let vars = env(&[
            ("RANKPULSE_SESSION_GAP", "45s"),
            ("rankpulse__kafka__brokers", "b:9092"),
            ("RANKPULSE_METRICS", "x"),
            // Read, or not meant for the configuration.
            ("RANKPULSE__SESSION__GAP", "45s"),
            ("RANKPULSE_TANSU", "/bin/tansu"),
            ("RANKPULSE_SESSIONS", "3"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(
            lookalike_overrides(vars),
            ["RANKPULSE_METRICS", "RANKPULSE_SESSION_GAP", "rankpulse__kafka__brokers"]
        );
    }

    #[test]
    fn environment_overrides_file_and_defaults() {
        let c = Config::load_with_env(
            None,
            env(&[
                ("RANKPULSE__SESSION__GAP", "45s"),
                ("RANKPULSE__METRICS__CUTOFFS", "[1, 10]"),
                ("RANKPULSE__METRICS__GAIN", "linear"),
                ("RANKPULSE__KAFKA__BROKERS", "a:9092,b:9092"),
                ("RANKPULSE__KAFKA__PROPERTIES__SASL_MECHANISM", "PLAIN"),
                ("RANKPULSE__JUDGMENTS__ACTIONS__LIKE", "2"),
                ("OTHER", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.session.gap.duration, Duration::from_secs(45));
        assert_eq!(c.metrics.cutoffs, [1, 10]);
        assert_eq!(c.metrics.gain, Gain::Linear);
        assert_eq!(c.kafka.brokers, "a:9092,b:9092");
        assert_eq!(c.kafka.properties["sasl.mechanism"], "PLAIN");
        assert_eq!(c.judgments.actions["like"], 2);
        let e = Config::load_with_env(None, env(&[("RANKPULSE__METRICS__MAX_GRADE", "many")])).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("environment variable RANKPULSE__METRICS__MAX_GRADE: config key metrics.max_grade:"),
            "{e}"
        );
    }

    /// An override's unknown key or bad value names the key and the
    /// variable it came from; a file's bad key is still the file's.
    #[test]
    fn environment_errors_name_their_variable() {
        let e = Config::load_with_env(None, env(&[("RANKPULSE__KAFKA__NOPE", "1")])).unwrap_err().to_string();
        assert!(
            e.starts_with("environment variable RANKPULSE__KAFKA__NOPE: config key kafka.nope: unknown field `nope`"),
            "{e}"
        );
        let e = Config::load_with_env(
            None,
            env(&[
                ("RANKPULSE__SESSION__GAP", "45s"),
                ("RANKPULSE__NOPE__GAP", "1"),
                ("RANKPULSE__KAFKA__BROKERS", "b:1"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("environment variable RANKPULSE__NOPE__GAP: config key nope: unknown field `nope`"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("rankpulse-config-env-{}", std::process::id()));
        std::fs::write(&dir, "[session]\ngapp = \"30s\"\n").unwrap();
        let e = Config::load_with_env(Some(&dir), env(&[("RANKPULSE__SESSION__GAP", "45s")])).unwrap_err().to_string();
        let _ = std::fs::remove_file(&dir);
        assert!(e.starts_with("config key session.gapp: unknown field `gapp`"), "{e}");
    }

    /// A text key takes a value that looks like a number or a boolean as
    /// text; numbers and durations are still checked, naming the key.
    #[test]
    fn environment_values_are_typed_by_their_key() {
        let c = Config::load_with_env(
            None,
            env(&[
                ("RANKPULSE__KAFKA__GROUP_ID", "1234"),
                ("RANKPULSE__STATE__INSTANCE", "true"),
                ("RANKPULSE__KAFKA__DEAD_LETTER_TOPIC", "2.5"),
                ("RANKPULSE__METRICS__MAX_GRADE", "3"),
            ]),
        )
        .unwrap();
        assert_eq!(c.kafka.group_id, "1234");
        assert_eq!(c.state.instance, "true");
        assert_eq!(c.kafka.dead_letter_topic, "2.5");
        assert_eq!(c.metrics.max_grade, 3);
        let e = Config::load_with_env(None, env(&[("RANKPULSE__SESSION__GAP", "soon")])).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("environment variable RANKPULSE__SESSION__GAP: config key session.gap:"), "{e}");
    }

    /// The whole property table may come from one variable, as TOML; an
    /// error about it never repeats its text (it may hold a password), and
    /// a list value is not mistaken for an unquoted dotted name.
    #[test]
    fn property_errors_keep_secrets_and_say_what_is_wrong() {
        let c = Config::load_with_env(
            None,
            env(&[("RANKPULSE__KAFKA__PROPERTIES", r#"{ "sasl.username" = "bob", "sasl.password" = "hunter2" }"#)]),
        )
        .unwrap();
        assert_eq!(c.kafka.properties["sasl.password"], "hunter2");
        assert_eq!(c.kafka.properties["sasl.username"], "bob");
        for value in [r#"{ "sasl.password" = "hunter2" "#, r#"sasl.password=hunter2"#] {
            let e =
                Config::load_with_env(None, env(&[("RANKPULSE__KAFKA__PROPERTIES", value)])).unwrap_err().to_string();
            assert!(e.starts_with("environment variable RANKPULSE__KAFKA__PROPERTIES:"), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let e = from_toml("[kafka]\nproperties = \"sasl.password=hunter2\"\n").unwrap_err().to_string();
        assert!(
            e.starts_with("config key kafka.properties: invalid type: string \"<redacted>\"") && !e.contains("hunter2"),
            "{e}"
        );
        let e = from_toml("[kafka.properties]\n\"sasl.password\" = [\"hunter2\"]\n").unwrap_err().to_string();
        assert!(e.contains("\"sasl.password\" is not text, a number or a boolean (librdkafka takes a list"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains("quote a property name"), "{e}");
        let e = from_toml("[kafka.properties]\nssl.ca.location = \"/ca.pem\"\n").unwrap_err().to_string();
        assert!(e.contains("quote a property name with dots"), "{e}");
        // A syntax error says where, not what the line holds.
        let e = from_toml("[kafka.properties]\n\"sasl.password\" = hunter2\n").unwrap_err().to_string();
        assert!(e.contains(": line 2, column ") && !e.contains("hunter2"), "{e}");
        // The whole table and a key of it, in either order: both apply.
        let table = ("RANKPULSE__KAFKA__PROPERTIES", r#"{ "sasl.username" = "bob" }"#);
        let key = ("RANKPULSE__KAFKA__PROPERTIES__SASL_MECHANISM", "PLAIN");
        for pairs in [[table, key], [key, table]] {
            let c = Config::load_with_env(None, env(&pairs)).unwrap();
            assert_eq!(
                (c.kafka.properties["sasl.username"].as_str(), c.kafka.properties["sasl.mechanism"].as_str()),
                ("bob", "PLAIN")
            );
        }
    }

    /// A default refused because of a key that was set says where that key
    /// was set: the default itself is nobody's.
    #[test]
    fn a_default_refused_because_of_another_key_names_that_keys_source() {
        let e = Config::load_with_env(None, env(&[("RANKPULSE__METRICS__MAX_GRADE", "2")])).unwrap_err().to_string();
        assert!(e.starts_with("config key judgments.actions.purchase: grade 3 is outside 0..=2"), "{e}");
        assert!(e.ends_with("; metrics.max_grade is set by environment variable RANKPULSE__METRICS__MAX_GRADE"), "{e}");
        let e = from_toml("[metrics]\nmax_grade = 2\n").unwrap_err().to_string();
        assert!(e.contains("; metrics.max_grade is set in config file "), "{e}");
        // A key the file set itself is the file's, as before.
        let e = from_toml("[metrics]\nmax_grade = 2\n[judgments.actions]\npurchase = 3\n").unwrap_err().to_string();
        assert!(e.starts_with("config key judgments.actions.purchase:") && e.contains("(config file "), "{e}");
    }
}
