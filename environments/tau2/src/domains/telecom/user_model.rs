//! The telecom user-side database: the simulated phone (`MockPhoneAttributes`) and the user's
//! surroundings, in tau2's field order with tau2's defaults. Enums are their string values.

use serde::{Deserialize, Serialize};

use crate::ordered_map::OrderedMap;

fn yes() -> bool {
    true
}

fn s(v: &str) -> String {
    v.to_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApnSettings {
    #[serde(default = "internet")]
    pub apn_name: String,
    #[serde(default)]
    pub reset_at_reboot: bool,
    #[serde(default = "mms_apn")]
    pub mms_apn: Option<String>,
    #[serde(default = "mmsc_url")]
    pub mmsc_url: Option<String>,
    #[serde(default)]
    pub mms_proxy: Option<String>,
    #[serde(default)]
    pub mms_port: Option<i64>,
}

fn internet() -> String {
    s("internet")
}

fn mms_apn() -> Option<String> {
    Some(s("mms"))
}

fn mmsc_url() -> Option<String> {
    Some(s("http://mms.carrier.com/mms/wapenc"))
}

impl Default for ApnSettings {
    fn default() -> Self {
        ApnSettings {
            apn_name: internet(),
            reset_at_reboot: false,
            mms_apn: mms_apn(),
            mmsc_url: mmsc_url(),
            mms_proxy: None,
            mms_port: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VpnDetails {
    #[serde(default)]
    pub server_address: Option<String>,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default = "unknown")]
    pub server_performance: String,
}

fn unknown() -> String {
    s("unknown")
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppPermissions {
    #[serde(default)]
    pub sms: bool,
    #[serde(default)]
    pub storage: bool,
    #[serde(default)]
    pub phone: bool,
    #[serde(default)]
    pub network: bool,
}

impl AppPermissions {
    /// `model_dump().items()`, in field order.
    pub fn items(&self) -> [(&'static str, bool); 4] {
        [("sms", self.sms), ("storage", self.storage), ("phone", self.phone), ("network", self.network)]
    }

    pub fn set(&mut self, name: &str, value: bool) -> bool {
        match name {
            "sms" => self.sms = value,
            "storage" => self.storage = value,
            "phone" => self.phone = value,
            "network" => self.network = value,
            _ => return false,
        }
        true
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppStatus {
    pub app_name: String,
    #[serde(default)]
    pub permissions: AppPermissions,
}

fn default_apps() -> OrderedMap<AppStatus> {
    [
        (
            s("messaging"),
            AppStatus {
                app_name: s("messaging"),
                permissions: AppPermissions { sms: true, storage: true, phone: true, network: false },
            },
        ),
        (
            s("browser"),
            AppStatus {
                app_name: s("browser"),
                permissions: AppPermissions { sms: false, storage: true, phone: false, network: true },
            },
        ),
    ]
    .into_iter()
    .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phone {
    #[serde(default = "active")]
    pub sim_card_status: String,
    #[serde(default)]
    pub sim_card_missing: bool,
    #[serde(default)]
    pub airplane_mode: bool,
    #[serde(default = "good")]
    pub network_signal_strength: String,
    #[serde(default = "five_g")]
    pub network_technology_connected: String,
    #[serde(default = "connected")]
    pub network_connection_status: String,
    #[serde(default = "eighty")]
    pub battery_level: i64,
    #[serde(default = "yes")]
    pub data_enabled: bool,
    #[serde(default)]
    pub roaming_enabled: bool,
    #[serde(default = "preferred")]
    pub network_mode_preference: String,
    #[serde(default)]
    pub active_apn_settings: ApnSettings,
    #[serde(default)]
    pub wifi_enabled: bool,
    #[serde(default)]
    pub wifi_connected: bool,
    #[serde(default)]
    pub wifi_ssid: Option<String>,
    #[serde(default = "none")]
    pub wifi_signal_strength: String,
    #[serde(default)]
    pub wifi_calling_enabled: bool,
    #[serde(default)]
    pub wifi_calling_mms_over_wifi: bool,
    #[serde(default)]
    pub data_saver_mode: bool,
    #[serde(default)]
    pub vpn_enabled_setting: bool,
    #[serde(default)]
    pub vpn_connected: bool,
    #[serde(default)]
    pub vpn_details: Option<VpnDetails>,
    #[serde(default = "default_apps")]
    pub app_statuses: OrderedMap<AppStatus>,
}

fn active() -> String {
    s("active")
}
fn good() -> String {
    s("good")
}
fn five_g() -> String {
    s("5G")
}
fn connected() -> String {
    s("connected")
}
fn eighty() -> i64 {
    80
}
fn preferred() -> String {
    s("4g_5g_preferred")
}
fn none() -> String {
    s("none")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentRequest {
    pub bill_id: String,
    pub amount_due: f64,
    #[serde(default)]
    pub paid: bool,
}

fn default_signal() -> OrderedMap<String> {
    [("2G", "poor"), ("3G", "fair"), ("4G", "good"), ("5G", "excellent")]
        .into_iter()
        .map(|(k, v)| (s(k), s(v)))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Surroundings {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub phone_number: Option<String>,
    #[serde(default)]
    pub is_abroad: bool,
    #[serde(default)]
    pub roaming_allowed: bool,
    #[serde(default = "default_signal")]
    pub signal_strength: OrderedMap<String>,
    #[serde(default)]
    pub mobile_data_usage_exceeded: bool,
    #[serde(default = "yes")]
    pub line_active: bool,
    #[serde(default)]
    pub payment_request: Option<PaymentRequest>,
}

impl Default for Surroundings {
    fn default() -> Self {
        serde_json::from_str("{}").expect("every field has a default")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelecomUserDb {
    #[serde(default = "default_phone")]
    pub device: Phone,
    #[serde(default)]
    pub surroundings: Surroundings,
}

fn default_phone() -> Phone {
    serde_json::from_str("{}").expect("every field has a default")
}
