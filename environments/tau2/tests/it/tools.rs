//! Representative tool outputs, errors, parties and the write flag, pinned by hand from tau2's
//! code and the data.

use serde_json::json;

use crate::common::{blank_task, call, domain, open};

#[tokio::test]
async fn mock_tools_render_models_and_errors_as_tau2_does() {
    let mock = domain("mock");
    let mut s = open(&mock, &blank_task());
    let out = call(&mut s, "agent", "create_task", json!({"user_id": "user_1", "title": "Plan"})).await;
    assert_eq!(out.content, r#"{"task_id": "task_2", "title": "Plan", "description": null, "status": "pending"}"#);
    assert!(out.write && !out.is_error);
    let out = call(&mut s, "agent", "create_task", json!({"user_id": "nobody", "title": "Plan"})).await;
    assert_eq!(out.content, "Error: User nobody not found");
    assert!(out.is_error && out.write, "a failed write is still a write call (replay re-runs it)");
    let out = call(&mut s, "agent", "get_users", json!({})).await;
    assert_eq!(out.content, r#"[{"user_id": "user_1", "name": "Test User", "tasks": ["task_1", "task_2"]}]"#);
    assert!(!out.write);
    let out = call(&mut s, "agent", "create_task", json!({"title": "Plan"})).await;
    assert_eq!(out.content, "Error: MockTools.create_task() missing 1 required positional argument: 'user_id'");
}

#[tokio::test]
async fn each_party_reaches_only_its_own_toolkit() {
    let mock = domain("mock");
    let mut s = open(&mock, &blank_task());
    let out = call(&mut s, "user", "create_task", json!({"user_id": "user_1", "title": "x"})).await;
    assert_eq!(out.content, "Error: Tool 'create_task' not found.");
    let out = call(&mut s, "agent", "dismiss_notification", json!({"notification_id": "notif_1"})).await;
    assert_eq!(out.content, "Error: Tool 'dismiss_notification' not found.");
    let out = call(&mut s, "user", "dismiss_notification", json!({"notification_id": "notif_1"})).await;
    assert_eq!(out.content, "Notification notif_1 dismissed");
    let airline = domain("airline");
    let mut s = open(&airline, &blank_task());
    let out = call(&mut s, "user", "get_user_details", json!({"user_id": "mia_li_3668"})).await;
    assert_eq!(out.content, "Error: User tools not available");
}

#[tokio::test]
async fn airline_echoes_numbers_as_python_prints_them() {
    let airline = domain("airline");
    let mut s = open(&airline, &blank_task());
    let out = call(&mut s, "agent", "send_certificate", json!({"user_id": "mia_li_3668", "amount": 100})).await;
    assert_eq!(out.content, "Certificate certificate_3221322 added to user mia_li_3668 with amount 100.");
    let out = call(&mut s, "agent", "send_certificate", json!({"user_id": "mia_li_3668", "amount": 100.0})).await;
    assert_eq!(out.content, "Certificate certificate_3221323 added to user mia_li_3668 with amount 100.0.");
    let out = call(&mut s, "agent", "get_user_details", json!({"user_id": "mia_li_3668"})).await;
    assert!(
        out.content.contains(
            r#""certificate_3221322": {"source": "certificate", "id": "certificate_3221322", "amount": 100.0}"#
        )
    );
    let out = call(&mut s, "agent", "calculate", json!({"expression": "100 / 3"})).await;
    assert_eq!(out.content, "33.33");
    // Lookups tolerate case, as tau2's voice-friendly lookups do.
    let out = call(&mut s, "agent", "get_reservation_details", json!({"reservation_id": "no6jo3"})).await;
    assert!(out.content.starts_with(r#"{"reservation_id": "NO6JO3", "#), "{}", out.content);
}

#[tokio::test]
async fn retail_lists_product_types_as_a_sorted_json_string() {
    let retail = domain("retail");
    let mut s = open(&retail, &blank_task());
    let out = call(&mut s, "agent", "list_all_product_types", json!({})).await;
    assert!(out.content.starts_with(r#"{"Action Camera": "3377618313", "Air Purifier": "3821016478", "#));
    let out = call(&mut s, "agent", "get_item_details", json!({"item_id": "1725100896"})).await;
    assert!(out.content.starts_with(r#"{"item_id": "1725100896", "options": {"#), "{}", out.content);
    let out = call(&mut s, "agent", "modify_pending_order_items", json!({
        "order_id": "#W5918442", "item_ids": ["1725100896"], "new_item_ids": ["1725100896"], "payment_method_id": "credit_card_5051208"
    }))
    .await;
    assert_eq!(out.content, "Error: The new item id should be different from the old item id");
}

#[tokio::test]
async fn telecom_dicts_stringify_numbers_and_the_phone_reports_in_emoji() {
    let telecom = domain("telecom");
    let mut s = open(&telecom, &blank_task());
    let out = call(&mut s, "agent", "get_data_usage", json!({"customer_id": "C1001", "line_id": "L1002"})).await;
    assert_eq!(
        out.content,
        r#"{"line_id": "L1002", "data_used_gb": "8.7", "data_limit_gb": "15.0", "data_refueling_gb": "0.0", "cycle_end_date": "2025-02-28"}"#
    );
    let out = call(&mut s, "agent", "get_details_by_id", json!({"id": "D1002"})).await;
    assert!(out.content.contains(r#""activation_date": "2025-02-15 11:45:00""#), "{}", out.content);
    let out = call(&mut s, "user", "toggle_airplane_mode", json!({})).await;
    assert_eq!(out.content, "Airplane Mode is now ON.\nStatus Bar: \u{2708}\u{fe0f} Airplane Mode | 🔋 80%");
    let out = call(&mut s, "user", "run_speed_test", json!({})).await;
    assert_eq!(out.content, "Speed test failed: No Connection.");
    let out = call(&mut s, "user", "toggle_airplane_mode", json!({})).await;
    assert_eq!(out.content, "Airplane Mode is now OFF.\nStatus Bar: 📶⁴ Excellent | 5G | 📱 Data Enabled | 🔋 80%");
}

#[tokio::test]
async fn telecom_syncs_payment_requests_between_the_two_sides() {
    let telecom = domain("telecom");
    // Any real task sets the user's phone number, which is what sync_tools keys on.
    let task = telecom.tasks.iter().find(|t| t.id.contains("overdue_bill_suspension")).unwrap();
    let mut s = open(&telecom, task);
    let out =
        call(&mut s, "agent", "send_payment_request", json!({"customer_id": "C1001", "bill_id": "B1234321"})).await;
    assert_eq!(out.content, "Payment request sent to the customer for bill B1234321");
    let out = call(&mut s, "user", "check_payment_request", json!({})).await;
    assert!(out.content.starts_with("You have a payment request for bill B1234321 of "), "{}", out.content);
    call(&mut s, "user", "make_payment", json!({})).await;
    let out = call(&mut s, "agent", "get_details_by_id", json!({"id": "B1234321"})).await;
    assert!(out.content.contains(r#""status": "Paid""#), "{}", out.content);
}

#[tokio::test]
async fn database_hashes_are_deterministic_and_follow_writes() {
    let mock = domain("mock");
    let a = open(&mock, &blank_task());
    let mut b = open(&mock, &blank_task());
    assert_eq!(a.db_hashes(), b.db_hashes());
    assert_eq!(
        a.db_canonical(false).unwrap(),
        r#"{"tasks": {"task_1": {"description": "A test task", "status": "pending", "task_id": "task_1", "title": "Test task"}}, "users": {"user_1": {"name": "Test User", "tasks": ["task_1"], "user_id": "user_1"}}}"#
    );
    call(&mut b, "agent", "update_task_status", json!({"task_id": "task_1", "status": "completed"})).await;
    assert_ne!(a.db_hashes().0, b.db_hashes().0);
    assert_eq!(a.db_hashes().1, b.db_hashes().1);
}

#[tokio::test]
async fn nested_lists_are_converted_only_when_every_item_is_an_object() {
    let airline = domain("airline");
    let mut s = open(&airline, &blank_task());
    let booking = |user: &str| {
        json!({"user_id": user, "origin": "JFK", "destination": "SEA", "flight_type": "one_way",
               "cabin": "economy", "flights": [null], "passengers": [null], "payment_methods": [null],
               "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no"})
    };
    let out = call(&mut s, "agent", "book_reservation", booking("User_id")).await;
    assert_eq!(out.content, "Error: User User_id not found");
    let out = call(&mut s, "agent", "book_reservation", booking("mia_li_3668")).await;
    assert!(out.content.starts_with("Error: 2 validation errors for Reservation\npassengers.0\n  Input should be a valid dictionary or instance of Passenger [type=model_type, input_value=None, input_type=NoneType]\npayment_history.0\n"), "{}", out.content);
    let mut fine = booking("mia_li_3668");
    fine["passengers"] = json!([{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}]);
    fine["payment_methods"] = json!([{"payment_id": "x", "amount": 1}]);
    let out = call(&mut s, "agent", "book_reservation", fine).await;
    assert_eq!(out.content, "Error: 'NoneType' object has no attribute 'flight_number'");
    let flights = json!({"reservation_id": "4WQ150", "cabin": "economy", "flights": [null], "payment_id": "x"});
    let out = call(&mut s, "agent", "update_reservation_flights", flights).await;
    assert_eq!(out.content, "Error: 'NoneType' object has no attribute 'flight_number'");
    let out =
        call(&mut s, "agent", "update_reservation_passengers", json!({"reservation_id": "NOPE", "passengers": [null]}))
            .await;
    assert_eq!(out.content, "Error: Reservation NOPE not found");
}
