//! `[http]`: where the last stage of the data flow is served (`crate::http`:
//! `/metrics`, the health checks and the status page).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of `/metrics`, `/healthz`, `/readyz` and the status page.
    pub listen: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig { listen: "127.0.0.1:9464".into() }
    }
}
