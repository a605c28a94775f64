//! The telecom agent-side database models in tau2's pydantic field order. Enums are kept as
//! their string values; dates as `YYYY-MM-DD` and datetimes as `str(datetime)`
//! (`YYYY-MM-DD HH:MM:SS`), which is how `json.dumps(..., default=str)` prints them.

use serde::{Deserialize, Deserializer, Serialize};

use crate::ordered_map::OrderedMap;

/// tau2 parses `2025-01-20T14:30:00` into a `datetime`, whose `str` has a space.
fn datetime<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|s| s.replacen('T', " ", 1)))
}

fn created_at<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(String::deserialize(d)?.replacen('T', " ", 1))
}

/// `DEFAULT_START_DATE`, a `date` that pydantic does not validate as a default.
fn default_created_at() -> String {
    "2025-01-01".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Address {
    pub street: String,
    pub city: String,
    pub state: String,
    pub zip_code: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub plan_id: String,
    pub name: String,
    pub data_limit_gb: f64,
    pub price_per_month: f64,
    pub data_refueling_price_per_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub device_id: String,
    pub device_type: String,
    pub model: String,
    #[serde(default)]
    pub imei: Option<String>,
    pub is_esim_capable: bool,
    #[serde(default)]
    pub activated: bool,
    #[serde(default, deserialize_with = "datetime")]
    pub activation_date: Option<String>,
    #[serde(default, deserialize_with = "datetime")]
    pub last_esim_transfer_date: Option<String>,
}

fn pending_activation() -> String {
    "Pending Activation".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub line_id: String,
    pub phone_number: String,
    #[serde(default = "pending_activation")]
    pub status: String,
    pub plan_id: String,
    #[serde(default)]
    pub device_id: Option<String>,
    #[serde(default)]
    pub data_used_gb: f64,
    #[serde(default)]
    pub data_refueling_gb: f64,
    #[serde(default)]
    pub roaming_enabled: bool,
    #[serde(default)]
    pub contract_end_date: Option<String>,
    #[serde(default)]
    pub last_plan_change_date: Option<String>,
    #[serde(default)]
    pub last_sim_replacement_date: Option<String>,
    #[serde(default)]
    pub suspension_start_date: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineItem {
    pub description: String,
    pub amount: f64,
    pub date: String,
    pub item_type: String,
}

fn draft() -> String {
    "Draft".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bill {
    pub bill_id: String,
    pub customer_id: String,
    pub period_start: String,
    pub period_end: String,
    pub issue_date: String,
    pub total_due: f64,
    pub due_date: String,
    #[serde(default)]
    pub line_items: Vec<LineItem>,
    #[serde(default = "draft")]
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentMethod {
    pub method_type: String,
    pub account_number_last_4: String,
    pub expiration_date: String,
}

fn pending_verification() -> String {
    "Pending Verification".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Customer {
    pub customer_id: String,
    pub full_name: String,
    pub date_of_birth: String,
    pub email: String,
    pub phone_number: String,
    pub address: Address,
    #[serde(default = "pending_verification")]
    pub account_status: String,
    #[serde(default)]
    pub payment_methods: Vec<PaymentMethod>,
    #[serde(default)]
    pub line_ids: Vec<String>,
    #[serde(default)]
    pub bill_ids: Vec<String>,
    #[serde(default = "default_created_at", deserialize_with = "created_at")]
    pub created_at: String,
    #[serde(default)]
    pub last_extension_date: Option<String>,
    #[serde(default)]
    pub goodwill_credit_used_this_year: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TelecomDb {
    #[serde(default)]
    pub plans: Vec<Plan>,
    #[serde(default)]
    pub customers: Vec<Customer>,
    #[serde(default)]
    pub lines: Vec<Line>,
    #[serde(default)]
    pub bills: Vec<Bill>,
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Newer tau2 data has this table; tau2's `TelecomDB` of this data does not, so an empty one
    /// is left out of dumps and hashes.
    #[serde(default, skip_serializing_if = "OrderedMap::is_empty")]
    pub phone_number_aliases: OrderedMap<String>,
}
