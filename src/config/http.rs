//! `[http]`: where the last stage of the data flow is served (`crate::http`:
//! `/metrics`, the health checks and the status page), and who may read it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of `/metrics`, `/healthz`, `/readyz` and the status page.
    pub listen: String,
    /// A web configuration file in the format of Prometheus's
    /// exporter-toolkit (`--web.config.file`): TLS, client certificates,
    /// basic-auth users, response headers. Unset: plain HTTP, no password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config: Option<std::path::PathBuf>,
    /// With `web_config`: `/healthz` and `/readyz` answer without a
    /// password (TLS still applies), so that probes need no credentials.
    pub open_probes: bool,
    /// bcrypt verifications run at once, off the runtime's workers: a
    /// flood of wrong passwords costs at most this many threads of CPU.
    pub max_password_checks: usize,
    /// A second address serving only `/healthz` and `/readyz` over plain
    /// HTTP, for probes that cannot meet `web_config` (a kubelet presents
    /// no client certificate). Unset: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_listen: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:9464".into(),
            web_config: None,
            open_probes: true,
            max_password_checks: 1,
            probe_listen: None,
        }
    }
}
