//! tau2's `TelecomUserTools`: the simulated phone the user operates (airplane mode, SIM, data,
//! APN, Wi-Fi, VPN, apps, payments), its network-search simulation, the helpers tasks use to
//! break the phone, and the assertions that score it. Outputs are tau2's strings, emoji and all.

use super::user_model::{ApnSettings, AppPermissions, TelecomUserDb, VpnDetails};
use crate::args::{Args, Num};
use crate::pyjson::{Py, str_repr};
use crate::toolkit::{Out, ToolError, ToolResult};

type R = ToolResult;

fn text(s: impl Into<String>) -> R {
    Ok(Out::Str(s.into()))
}

fn boolean(b: bool) -> R {
    Ok(Out::Json(Py::Bool(b)))
}

fn on_off(b: bool) -> &'static str {
    if b { "ON" } else { "OFF" }
}

fn yes_no(b: bool) -> &'static str {
    if b { "Yes" } else { "No" }
}

pub fn call(db: &mut TelecomUserDb, name: &str, args: &Args) -> Option<R> {
    Some(match name {
        "check_status_bar" => text(format!("Status Bar: {}", status_bar(db))),
        "check_network_status" => text(network_status(db)),
        "check_network_mode_preference" => {
            text(format!("Network Mode Preference: {}", db.device.network_mode_preference))
        }
        "set_network_mode_preference" => set_network_mode(db, args),
        "run_speed_test" => text(speed_test_text(db)),
        "toggle_airplane_mode" => {
            let state = toggle_airplane(db);
            with_status(db, format!("Airplane Mode is now {}.", on_off(state)))
        }
        "check_sim_status" => text(match sim_status(db).as_str() {
            "active" => "Your SIM card is active and working.".to_owned(),
            "missing" => "No SIM card detected in the phone.".to_owned(),
            "locked_pin" => "The SIM card is locked with a PIN code.".to_owned(),
            "locked_puk" => "The SIM card is locked with a PUK code.".to_owned(),
            other => format!("Unknown SIM status: {other}"),
        }),
        "reseat_sim_card" => {
            db.device.sim_card_missing = false;
            network_search(db);
            with_status(db, "SIM card re-seated successfully.")
        }
        "toggle_data" => {
            let state = toggle_data(db);
            with_status(db, format!("Mobile Data is now {}.", on_off(state)))
        }
        "toggle_roaming" => {
            let state = toggle_roaming(db);
            with_status(db, format!("Data Roaming is now {}.", on_off(state)))
        }
        "check_data_restriction_status" => text(if db.device.data_saver_mode {
            "Data Saver mode is ON (limits data usage)."
        } else {
            "Data Saver mode is OFF."
        }),
        "toggle_data_saver_mode" => {
            db.device.data_saver_mode = !db.device.data_saver_mode;
            let state = db.device.data_saver_mode;
            with_status(db, format!("Data Saver Mode is now {}.", on_off(state)))
        }
        "check_apn_settings" => {
            let apn = &db.device.active_apn_settings;
            let name = if apn.apn_name.is_empty() { "Not Set" } else { &apn.apn_name };
            let mmsc = apn.mmsc_url.as_deref().filter(|u| !u.is_empty()).unwrap_or("Not Set");
            text(format!(
                "Current APN Name: {name}\nMMSC URL (for picture messages): {mmsc}\n(These are technical settings, usually best left unchanged.)"
            ))
        }
        "set_apn_settings" => set_apn_settings(db, args),
        "reset_apn_settings" => {
            db.device.active_apn_settings.reset_at_reboot = true;
            network_search(db);
            with_status(db, "APN settings will reset at reboot.")
        }
        "check_wifi_status" => {
            let d = &db.device;
            text(if !d.wifi_enabled {
                "Wi-Fi is turned OFF.".to_owned()
            } else if d.wifi_connected {
                format!(
                    "Wi-Fi is ON and connected to '{}'. Signal strength: {}.",
                    d.wifi_ssid.as_deref().unwrap_or("None"),
                    d.wifi_signal_strength
                )
            } else {
                "Wi-Fi is ON but not connected to any network.".to_owned()
            })
        }
        "toggle_wifi" => {
            if db.device.airplane_mode {
                return Some(text(format!(
                    "Cannot change Wi-Fi settings while Airplane Mode is ON.\nStatus Bar: {}",
                    status_bar(db)
                )));
            }
            let state = !db.device.wifi_enabled;
            db.device.wifi_enabled = state;
            if !state {
                disconnect_wifi(db);
            }
            with_status(db, format!("Wi-Fi is now {}.", on_off(state)))
        }
        "check_wifi_calling_status" => {
            text(format!("Wi-Fi Calling is currently turned {}.", on_off(db.device.wifi_calling_enabled)))
        }
        "toggle_wifi_calling" => {
            db.device.wifi_calling_enabled = !db.device.wifi_calling_enabled;
            let state = db.device.wifi_calling_enabled;
            with_status(db, format!("Wi-Fi Calling is now {}.", on_off(state)))
        }
        "check_vpn_status" => text(vpn_status(db)),
        "connect_vpn" => {
            if !connect_vpn(db) {
                return Some(text("VPN already connected."));
            }
            with_status(db, "VPN connected successfully.")
        }
        "disconnect_vpn" => {
            let done = disconnect_vpn(db);
            let msg = if done { "VPN disconnected successfully." } else { "No active VPN connection to disconnect." };
            with_status(db, msg)
        }
        "check_installed_apps" => {
            let names: Vec<&str> = db.device.app_statuses.keys().map(String::as_str).collect();
            text(format!("The following apps are installed on the phone: {}", names.join(", ")))
        }
        "check_app_status" => args.str("app_name").and_then(|app| app_status(db, &app)),
        "check_app_permissions" => args.str("app_name").and_then(|app| {
            let Some(status) = db.device.app_statuses.get(&app) else {
                return text(format!("App '{app}' not found on this phone."));
            };
            let allowed = allowed(&status.permissions);
            text(if allowed.is_empty() {
                format!("App '{app}' currently has no permissions granted.")
            } else {
                format!("App '{app}' has permission for: {}.", allowed.join(", "))
            })
        }),
        "grant_app_permission" => grant_permission(db, args),
        "can_send_mms" => text(if can_send_mms(db) {
            "Your messaging app can send MMS messages."
        } else {
            "Your messaging app cannot send MMS messages."
        }),
        "reboot_device" => {
            let mut lines = Vec::new();
            if db.device.active_apn_settings.reset_at_reboot {
                lines.push("Resetting APN settings...");
                db.device.active_apn_settings = ApnSettings::default();
            }
            lines.push("Restarting network services...");
            db.device.network_connection_status = "searching".into();
            network_search(db);
            with_status(db, lines.join("\n"))
        }
        "check_payment_request" => text(match &db.surroundings.payment_request {
            None => "No payment request has been made.".to_owned(),
            Some(p) => format!(
                "You have a payment request for bill {} of {} USD.",
                p.bill_id,
                Num::Float(p.amount_due).py_str()
            ),
        }),
        "make_payment" => text(match db.surroundings.payment_request.as_mut() {
            None => "You do not have a payment request.".to_owned(),
            Some(p) => {
                p.paid = true;
                format!("Payment of {} USD has been made for bill {}.", Num::Float(p.amount_due).py_str(), p.bill_id)
            }
        }),
        _ => return helper(db, name, args),
    })
}

/// The non-tool methods tasks call in `initialization_actions` and `env_assertions`.
fn helper(db: &mut TelecomUserDb, name: &str, args: &Args) -> Option<R> {
    Some(match name {
        "set_user_info" => (|| {
            db.surroundings.name = Some(args.str("name")?);
            db.surroundings.phone_number = Some(args.str("phone_number")?);
            Ok(Out::Json(Py::None))
        })(),
        "set_user_location" => args.bool("abroad").map(|abroad| {
            db.surroundings.is_abroad = abroad;
            Out::Json(Py::None)
        }),
        "turn_airplane_mode_on" => {
            if !toggle_airplane(db) {
                toggle_airplane(db);
            }
            text("Airplane Mode is now ON.")
        }
        "turn_airplane_mode_off" => {
            if toggle_airplane(db) {
                toggle_airplane(db);
            }
            text("Airplane Mode is now OFF.")
        }
        "unseat_sim_card" => {
            db.device.sim_card_missing = true;
            network_search(db);
            text("SIM card un-seated successfully.")
        }
        "lock_sim_card" => args.str("mode").and_then(|mode| {
            match mode.as_str() {
                "pin" => db.device.sim_card_status = "locked_pin".into(),
                "puk" => db.device.sim_card_status = "locked_puk".into(),
                _ => {}
            }
            network_search(db);
            text(format!("SIM card locked successfully in {mode} mode."))
        }),
        "turn_data_on" => {
            db.device.data_enabled = true;
            text("Data connection restored.")
        }
        "turn_data_off" => {
            if toggle_data(db) {
                toggle_data(db);
            }
            text("Data connection broken.")
        }
        "turn_roaming_on" => {
            if !toggle_roaming(db) {
                toggle_roaming(db);
            }
            text("Data Roaming is now ON.")
        }
        "turn_roaming_off" => {
            if toggle_roaming(db) {
                toggle_roaming(db);
            }
            text("Data Roaming is now OFF.")
        }
        "turn_data_saver_mode_on" => {
            db.device.data_saver_mode = true;
            text("Data Saver Mode is now ON.")
        }
        "turn_data_saver_mode_off" => {
            db.device.data_saver_mode = false;
            text("Data Saver Mode is now OFF.")
        }
        "break_apn_settings" => {
            db.device.active_apn_settings.apn_name = "broken".into();
            network_search(db);
            text("APN settings broken. Please call reset_apn_settings() to fix.")
        }
        "break_apn_mms_setting" => {
            db.device.active_apn_settings.mmsc_url = None;
            text("APN MMS setting broken. Please call reset_apn_settings() to fix.")
        }
        "set_wifi_calling" => (|| {
            let enabled = args.bool("enabled")?;
            if db.device.wifi_calling_enabled != enabled {
                db.device.wifi_calling_enabled = !db.device.wifi_calling_enabled;
            }
            let mut msg = format!("Wi-Fi Calling is now {}.", on_off(enabled));
            if let Some(serde_json::Value::Bool(mms)) = args.get("mms_over_wifi") {
                db.device.wifi_calling_mms_over_wifi = *mms;
                msg.push_str(&format!("\nMMS over Wi-Fi is now {}.", on_off(*mms)));
            }
            text(msg)
        })(),
        "break_vpn" => {
            connect_vpn(db);
            if let Some(details) = db.device.vpn_details.as_mut() {
                details.server_performance = "poor".into();
            }
            text("VPN connection broken.")
        }
        "remove_app_permission" => (|| {
            let app = args.str("app_name")?;
            let permission = args.str("permission")?.to_lowercase();
            let Some(status) = db.device.app_statuses.get_mut(&app) else {
                return Ok(Out::Json(Py::List(vec![
                    Py::Str("False".into()),
                    Py::Str(format!("App '{app}' not found. Cannot remove permission.")),
                ])));
            };
            let ok = status.permissions.set(&permission, false);
            let msg = if ok {
                format!("Permission '{permission}' removed from app '{app}'.")
            } else {
                format!("Permission '{permission}' not tracked for app '{app}'.")
            };
            // A tuple through tau2's `_process`: the bool becomes its `str`.
            let ok = if ok { "True" } else { "False" };
            Ok(Out::Json(Py::List(vec![Py::Str(ok.into()), Py::Str(msg)])))
        })(),
        "simulate_network_search" => {
            network_search(db);
            Ok(Out::Json(Py::None))
        }
        "assert_airplane_mode_status" => {
            args.bool("expected_status").and_then(|e| boolean(db.device.airplane_mode == e))
        }
        "assert_service_status" => args.str("expected_status").and_then(|e| {
            if !["connected", "searching", "no_service", "emergency_only"].contains(&e.as_str()) {
                return Err(ToolError::new(format!("'{e}' is not a valid NetworkStatus")));
            }
            boolean(db.device.network_connection_status == e)
        }),
        "assert_mobile_data_status" => args.bool("expected_status").and_then(|e| boolean(mobile_data_working(db) == e)),
        "assert_mobile_roaming_status" => {
            args.bool("expected_status").and_then(|e| boolean(db.device.roaming_enabled == e))
        }
        "assert_mobile_data_saver_mode_status" => {
            args.bool("expected_status").and_then(|e| boolean(db.device.data_saver_mode == e))
        }
        "assert_internet_speed" => (|| {
            let expected = args.num("expected_speed")?.as_f64();
            let (speed, desc) = speed_test(db);
            let speed = speed.unwrap_or(0.0);
            match args.opt_str("expected_desc")? {
                None => boolean(speed >= expected),
                Some(want) => boolean(speed >= expected && desc.to_lowercase() == want.to_lowercase()),
            }
        })(),
        "assert_internet_not_excellent" => boolean(speed_test(db).1.to_lowercase() != "excellent"),
        "assert_can_send_mms" => args.bool("expected_status").and_then(|e| boolean(can_send_mms(db) == e)),
        "assert_mobile_data_usage_exceeded" => {
            args.bool("expected_status").and_then(|e| boolean(db.surroundings.mobile_data_usage_exceeded == e))
        }
        _ => return None,
    })
}

fn with_status(db: &TelecomUserDb, update: impl Into<String>) -> R {
    text(format!("{}\nStatus Bar: {}", update.into(), status_bar(db)))
}

fn status_bar(db: &TelecomUserDb) -> String {
    let d = &db.device;
    let mut parts: Vec<String> = Vec::new();
    if d.airplane_mode {
        parts.push("\u{2708}\u{fe0f} Airplane Mode".into());
    } else {
        parts.push(
            match d.network_signal_strength.as_str() {
                "poor" => "📶¹ Poor",
                "fair" => "📶² Fair",
                "good" => "📶³ Good",
                "excellent" => "📶⁴ Excellent",
                _ => "📵 No Signal",
            }
            .into(),
        );
        if d.network_technology_connected != "none" {
            parts.push(d.network_technology_connected.clone());
        }
        if d.data_enabled && d.network_technology_connected != "none" {
            parts.push("📱 Data Enabled".into());
            if d.data_saver_mode {
                parts.push("🔽 Data Saver".into());
            }
        } else {
            parts.push("📵 Data Disabled".into());
        }
    }
    if d.wifi_enabled && d.wifi_connected {
        match d.wifi_ssid.as_deref().filter(|s| !s.is_empty()) {
            Some(ssid) => parts.push(format!("📡 Connected to {ssid}")),
            None => parts.push("📡 Enabled".into()),
        }
    }
    if d.vpn_connected {
        parts.push("🔒 VPN Connected".into());
    }
    parts.push(format!("🔋 {}%", d.battery_level));
    parts.join(" | ")
}

fn sim_status(db: &TelecomUserDb) -> String {
    if db.device.sim_card_missing { "missing".into() } else { db.device.sim_card_status.clone() }
}

fn network_status(db: &TelecomUserDb) -> String {
    let d = &db.device;
    let mut lines = vec![
        format!("Airplane Mode: {}", on_off(d.airplane_mode)),
        format!("SIM Card Status: {}", sim_status(db)),
        format!("Cellular Connection: {}", d.network_connection_status),
        format!("Cellular Signal: {}", d.network_signal_strength),
        format!("Cellular Network Type: {}", d.network_technology_connected),
        format!("Mobile Data Enabled: {}", yes_no(d.data_enabled)),
        format!("Data Roaming Enabled: {}", yes_no(d.roaming_enabled)),
        format!("Wi-Fi Radio: {}", on_off(d.wifi_enabled)),
        format!("Wi-Fi Connected: {}", yes_no(d.wifi_connected)),
    ];
    if d.wifi_connected {
        lines.push(format!("Connected Wi-Fi Network: {}", d.wifi_ssid.as_deref().unwrap_or("None")));
    }
    lines.join("\n")
}

const MODES: [&str; 4] = ["4g_5g_preferred", "4g_only", "3g_only", "2g_only"];

fn set_network_mode(db: &mut TelecomUserDb, args: &Args) -> R {
    let raw = args.get("mode").cloned().unwrap_or(serde_json::Value::Null);
    let mode = raw.as_str().filter(|m| MODES.contains(m));
    match mode {
        None => {
            let shown = match &raw {
                serde_json::Value::String(s) => s.clone(),
                other => Py::from(other).dumps(),
            };
            text(format!(
                "Failed to set network mode: '{shown}' is not a valid option. Please use one of: {}\nStatus Bar: {}",
                MODES.join(", "),
                status_bar(db)
            ))
        }
        Some(mode) => {
            db.device.network_mode_preference = mode.to_owned();
            network_search(db);
            with_status(db, format!("Preferred Network Mode set to: {mode}"))
        }
    }
}

pub fn mobile_data_working(db: &TelecomUserDb) -> bool {
    let (d, s) = (&db.device, &db.surroundings);
    if d.airplane_mode || d.network_signal_strength == "none" || d.network_connection_status == "no_service" {
        return false;
    }
    if s.is_abroad && (!d.roaming_enabled || !s.roaming_allowed) {
        return false;
    }
    d.data_enabled && !s.mobile_data_usage_exceeded
}

fn speed_test(db: &TelecomUserDb) -> (Option<f64>, String) {
    if !mobile_data_working(db) {
        return (None, "No Connection".into());
    }
    let d = &db.device;
    let mut factor = if d.vpn_connected && d.vpn_details.as_ref().is_some_and(|v| v.server_performance == "poor") {
        0.1
    } else {
        1.0
    };
    if d.data_saver_mode {
        factor *= 0.2;
    }
    let (lo, hi) = match d.network_technology_connected.as_str() {
        "2G" => (0.1, 0.4),
        "3G" => (1.0, 5.0),
        "4G" => (10.0, 100.0),
        "5G" => (50.0, 500.0),
        _ => (0.0, 0.0),
    };
    let signal = match d.network_signal_strength.as_str() {
        "poor" => 0.2,
        "fair" => 0.5,
        "good" => 0.8,
        "excellent" => 1.0,
        _ => 0.0,
    };
    let speed = crate::pyjson::round2((lo + hi) / 2.0 * signal * factor);
    let desc = if speed < 1.0 {
        "Very Poor"
    } else if speed < 5.0 {
        "Poor"
    } else if speed < 25.0 {
        "Fair"
    } else if speed < 100.0 {
        "Good"
    } else {
        "Excellent"
    };
    (Some(speed), desc.into())
}

fn speed_test_text(db: &TelecomUserDb) -> String {
    let (speed, desc) = speed_test(db);
    let Some(speed) = speed else {
        return format!("Speed test failed: {desc}.");
    };
    let advice = match desc.as_str() {
        "Very Poor" => "Connection is very slow. Basic web browsing might be difficult.",
        "Poor" => "Connection is slow. Web browsing may be sluggish, streaming difficult.",
        "Fair" => "Connection is okay for web browsing and some standard definition streaming.",
        "Good" => "Connection is good for most activities, including HD streaming.",
        "Excellent" => "Connection is very fast.",
        _ => "",
    };
    format!("Speed Test Result: {speed:.2} Mbps ({desc}). {advice}")
}

fn disconnect_wifi(db: &mut TelecomUserDb) {
    db.device.wifi_connected = false;
    db.device.wifi_ssid = None;
    db.device.wifi_signal_strength = "none".into();
}

fn toggle_airplane(db: &mut TelecomUserDb) -> bool {
    let was_on = db.device.airplane_mode;
    db.device.airplane_mode = !was_on;
    if was_on {
        db.device.network_connection_status = "searching".into();
        if db.device.wifi_enabled {
            disconnect_wifi(db);
        }
    } else {
        disconnect_wifi(db);
        if db.device.vpn_connected {
            disconnect_vpn(db);
        }
    }
    network_search(db);
    db.device.airplane_mode
}

fn toggle_data(db: &mut TelecomUserDb) -> bool {
    db.device.data_enabled = !db.device.data_enabled;
    network_search(db);
    db.device.data_enabled
}

fn toggle_roaming(db: &mut TelecomUserDb) -> bool {
    db.device.roaming_enabled = !db.device.roaming_enabled;
    network_search(db);
    db.device.roaming_enabled
}

fn set_apn_settings(db: &mut TelecomUserDb, args: &Args) -> R {
    let raw = args.get("apn_settings").cloned().unwrap_or(serde_json::Value::Null);
    // tau2 converts only a dict (`if isinstance(apn_settings, dict)`); anything else is stored
    // as it is and fails at `apn_settings.apn_name`. The typed device cannot hold it, so the
    // settings stay as they were (tau2's device would keep the bad value).
    let serde_json::Value::Object(map) = &raw else {
        return Err(ToolError::new(format!("'{}' object has no attribute 'apn_name'", crate::args::py_type(&raw))));
    };
    if let Some(extra) = map.keys().find(|k| {
        !["apn_name", "reset_at_reboot", "mms_apn", "mmsc_url", "mms_proxy", "mms_port"].contains(&k.as_str())
    }) {
        return Err(ToolError::new(format!(
            "1 validation error for APNSettings\n{extra}\n  Extra inputs are not permitted [type=extra_forbidden]"
        )));
    }
    let settings: ApnSettings = serde_json::from_value(raw.clone())
        .map_err(|e| ToolError::new(format!("1 validation error for APNSettings\n  {e}")))?;
    if settings.apn_name != "internet" && settings.apn_name != "broken" {
        return Err(ToolError::new(format!(
            "1 validation error for APNSettings\napn_name\n  Input should be 'internet' or 'broken' [type=enum, input_value={}]",
            str_repr(&settings.apn_name)
        )));
    }
    let update = format!("APN settings set to: {}", settings.apn_name);
    db.device.active_apn_settings = settings;
    network_search(db);
    with_status(db, update)
}

fn vpn_status(db: &TelecomUserDb) -> String {
    let d = &db.device;
    if d.vpn_connected {
        match &d.vpn_details {
            Some(v) => format!("VPN is ON and connected. Details: {}", vpn_repr(v)),
            None => "VPN is ON and connected (no specific details available).".into(),
        }
    } else if d.vpn_enabled_setting {
        "VPN is turned ON in settings, but currently not connected.".into()
    } else {
        "VPN is turned OFF.".into()
    }
}

/// `str(model_dump())` of the VPN details: a Python dict repr with the enum member's repr.
fn vpn_repr(v: &VpnDetails) -> String {
    let opt = |s: &Option<String>| s.as_deref().map(str_repr).unwrap_or_else(|| "None".into());
    let member = v.server_performance.to_uppercase();
    format!(
        "{{'server_address': {}, 'protocol': {}, 'server_performance': <PerformanceLevel.{member}: {}>}}",
        opt(&v.server_address),
        opt(&v.protocol),
        str_repr(&v.server_performance)
    )
}

fn connect_vpn(db: &mut TelecomUserDb) -> bool {
    if db.device.vpn_connected {
        return false;
    }
    db.device.vpn_connected = true;
    db.device.vpn_details = Some(VpnDetails {
        server_address: Some("192.168.1.1".into()),
        protocol: Some("OpenVPN".into()),
        server_performance: "excellent".into(),
    });
    true
}

fn disconnect_vpn(db: &mut TelecomUserDb) -> bool {
    if !db.device.vpn_connected {
        return false;
    }
    db.device.vpn_connected = false;
    db.device.vpn_details = None;
    true
}

fn allowed(p: &AppPermissions) -> Vec<String> {
    p.items().iter().filter(|(_, on)| *on).map(|(name, _)| name.replace('_', " ").to_lowercase()).collect()
}

fn app_status(db: &TelecomUserDb, app: &str) -> R {
    let Some(status) = db.device.app_statuses.get(app) else {
        return text(format!("App '{app}' not found on this phone."));
    };
    let mut lines = vec![format!("Status for App: {app}")];
    let allowed = allowed(&status.permissions);
    if allowed.is_empty() {
        lines.push(" - Permissions: None granted.".into());
    } else {
        lines.push(" - Permissions Granted:".into());
        lines.extend(allowed.iter().map(|p| format!("   - {p}")));
    }
    text(lines.join("\n"))
}

fn grant_permission(db: &mut TelecomUserDb, args: &Args) -> R {
    let app = args.str("app_name")?;
    let permission = args.str("permission")?.to_lowercase();
    let (ok, message) = match db.device.app_statuses.get_mut(&app) {
        Some(status) => {
            if status.permissions.set(&permission, true) {
                (true, format!("Permission '{permission}' granted to app '{app}'."))
            } else {
                (
                    false,
                    format!(
                        "Permission '{permission}' not tracked for app '{app}', available permissions: ['sms', 'storage', 'phone', 'network']"
                    ),
                )
            }
        }
        None => (false, format!("App '{app}' not found. Cannot grant permission.")),
    };
    let result = if ok { "Success. " } else { "Error. " };
    text(format!("{result}{message}\nStatus Bar: {}", status_bar(db)))
}

fn can_send_mms(db: &TelecomUserDb) -> bool {
    let d = &db.device;
    if !mobile_data_working(db) || d.network_technology_connected == "2G" {
        return false;
    }
    if d.wifi_calling_enabled && d.wifi_calling_mms_over_wifi {
        return false;
    }
    if d.active_apn_settings.mmsc_url.is_none() {
        return false;
    }
    d.app_statuses.get("messaging").is_some_and(|m| m.permissions.storage && m.permissions.sms)
}

/// tau2's `simulate_network_search`: what the phone connects to, given SIM, preference,
/// surroundings, airplane mode, APN and line status.
pub fn network_search(db: &mut TelecomUserDb) {
    let sim = sim_status(db);
    let (d, s) = (&mut db.device, &db.surroundings);
    let signal = |tech: &str| s.signal_strength.get(tech).cloned().unwrap_or_else(|| "none".into());
    if sim == "active" {
        d.network_connection_status = "connected".into();
        let tech = match d.network_mode_preference.as_str() {
            "4g_5g_preferred" => {
                if signal("5G") == "none" {
                    "4G"
                } else {
                    "5G"
                }
            }
            "3g_only" => "3G",
            "2g_only" => "2G",
            _ => "4G",
        };
        d.network_technology_connected = tech.into();
        d.network_signal_strength = signal(tech);
    } else {
        no_service(d);
    }
    if d.airplane_mode || d.active_apn_settings.apn_name == "broken" || !s.line_active {
        no_service(d);
    }
}

fn no_service(d: &mut super::user_model::Phone) {
    d.network_connection_status = "no_service".into();
    d.network_technology_connected = "none".into();
    d.network_signal_strength = "none".into();
}
