//! tau2's `TelecomTools` (the agent's toolkit) and its helpers for task set-up and assertions.
//! "Today" is tau2's fixed 2025-02-25, so every date it derives is a constant here. The one
//! departure: a new draft bill's id is derived from the customer and the bill count instead
//! of `uuid4`, so that replays and gold runs agree (tau2's id is random).

use super::model::{Bill, Customer, Line, LineItem, Plan, TelecomDb};
use crate::args::{Args, Num};
use crate::domains::model;
use crate::fold::{fold_for_match, folds_to};
use crate::pyjson::{Py, float_repr};
use crate::toolkit::{Out, ToolError, ToolResult};

pub const TODAY: &str = "2025-02-25";

pub fn call(db: &mut TelecomDb, name: &str, args: &Args) -> Option<ToolResult> {
    Some(match name {
        "get_customer_by_phone" => args.str("phone_number").and_then(|p| customer_by_phone(db, &p).map(model)),
        "get_customer_by_id" => args.str("customer_id").and_then(|id| customer(db, &id).map(model)),
        "get_customer_by_name" => (|| {
            let name = fold_for_match(&args.str("full_name")?);
            let dob = args.str("dob")?;
            let found: Vec<&Customer> =
                db.customers.iter().filter(|c| folds_to(&c.full_name, &name) && c.date_of_birth == dob).collect();
            Ok(model(&found))
        })(),
        "get_details_by_id" => args.str("id").and_then(|id| details(db, &id)),
        "suspend_line" => suspend_line(db, args),
        "resume_line" => resume_line(db, args),
        "get_bills_for_customer" => bills_for_customer(db, args),
        "send_payment_request" => send_payment_request(db, args),
        "get_data_usage" => data_usage(db, args),
        "enable_roaming" => set_roaming(db, args, true),
        "disable_roaming" => set_roaming(db, args, false),
        "transfer_to_human_agents" => Ok(Out::Str("Transfer successful".into())),
        "refuel_data" => refuel_data(db, args),
        "set_data_usage" => (|| {
            let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
            let used = args.num("data_used_gb")?;
            target_line(db, &customer_id, &line_id)?.data_used_gb = used.as_f64();
            Ok(Out::Str(format!("Data usage set to {} GB for line {line_id}", used.py_str())))
        })(),
        "suspend_line_for_overdue_bill" => suspend_for_overdue(db, args),
        "assert_data_refueling_amount" => (|| {
            let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
            let expected = args.num("expected_amount")?.as_f64();
            let line = target_line(db, &customer_id, &line_id)?;
            Ok(Out::Json(Py::Bool((line.data_refueling_gb - expected).abs() < 1e-6)))
        })(),
        "assert_line_status" => (|| {
            let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
            let expected = args.str("expected_status")?;
            Ok(Out::Json(Py::Bool(target_line(db, &customer_id, &line_id)?.status == expected)))
        })(),
        "assert_overdue_bill_exists" => (|| {
            let customer_id = args.str("customer_id")?;
            let bill_id = args.str("overdue_bill_id")?;
            if !customer(db, &customer_id)?.bill_ids.contains(&bill_id) {
                return Err(ToolError::new(format!("Overdue bill {bill_id} not found")));
            }
            if bill(db, &bill_id)?.status != "Overdue" {
                return Err(ToolError::new(format!("Overdue bill {bill_id} is not overdue")));
            }
            Ok(Out::Json(Py::Bool(true)))
        })(),
        "assert_no_overdue_bill" => (|| {
            let bill_id = args.str("overdue_bill_id")?;
            Ok(Out::Json(Py::Bool(match bill(db, &bill_id) {
                Ok(b) => b.status == "Paid",
                Err(_) => true,
            })))
        })(),
        _ => return None,
    })
}

fn digits(phone: &str) -> String {
    phone.chars().filter(|c| c.is_ascii_digit()).collect()
}

pub fn customer<'a>(db: &'a TelecomDb, id: &str) -> Result<&'a Customer, ToolError> {
    db.customers
        .iter()
        .find(|c| c.customer_id == id)
        .ok_or_else(|| ToolError::new(format!("Customer with ID {id} not found")))
}

fn customer_mut<'a>(db: &'a mut TelecomDb, id: &str) -> Result<&'a mut Customer, ToolError> {
    db.customers
        .iter_mut()
        .find(|c| c.customer_id == id)
        .ok_or_else(|| ToolError::new(format!("Customer with ID {id} not found")))
}

pub fn customer_by_phone<'a>(db: &'a TelecomDb, phone: &str) -> Result<&'a Customer, ToolError> {
    let wanted = digits(phone);
    let not_found = || ToolError::new(format!("Customer with phone number {phone} not found"));
    if wanted.is_empty() {
        return Err(not_found());
    }
    for customer in &db.customers {
        if digits(&customer.phone_number) == wanted {
            return Ok(customer);
        }
        for line_id in &customer.line_ids {
            if digits(&line_by_id(db, line_id)?.phone_number) == wanted {
                return Ok(customer);
            }
        }
    }
    Err(not_found())
}

pub fn line_by_id<'a>(db: &'a TelecomDb, id: &str) -> Result<&'a Line, ToolError> {
    db.lines.iter().find(|l| l.line_id == id).ok_or_else(|| ToolError::new(format!("Line with ID {id} not found")))
}

/// tau2's `_get_line_by_phone`, aliases included.
pub fn line_by_phone<'a>(db: &'a TelecomDb, phone: &str) -> Result<&'a Line, ToolError> {
    let mut wanted = digits(phone);
    if let Some((_, canonical)) = db.phone_number_aliases.iter().find(|(alias, _)| digits(alias) == wanted) {
        wanted = digits(canonical);
    }
    db.lines
        .iter()
        .find(|l| !wanted.is_empty() && digits(&l.phone_number) == wanted)
        .ok_or_else(|| ToolError::new(format!("Line with phone number {phone} not found")))
}

pub fn plan<'a>(db: &'a TelecomDb, id: &str) -> Result<&'a Plan, ToolError> {
    db.plans.iter().find(|p| p.plan_id == id).ok_or_else(|| ToolError::new(format!("Plan with ID {id} not found")))
}

fn bill<'a>(db: &'a TelecomDb, id: &str) -> Result<&'a Bill, ToolError> {
    db.bills.iter().find(|b| b.bill_id == id).ok_or_else(|| ToolError::new(format!("Bill with ID {id} not found")))
}

pub fn bill_mut<'a>(db: &'a mut TelecomDb, id: &str) -> Result<&'a mut Bill, ToolError> {
    db.bills.iter_mut().find(|b| b.bill_id == id).ok_or_else(|| ToolError::new(format!("Bill with ID {id} not found")))
}

/// The customer's bills awaiting payment, in `bill_ids` order.
pub fn awaiting_payment<'a>(db: &'a TelecomDb, customer: &Customer) -> Result<Vec<&'a Bill>, ToolError> {
    let mut out = Vec::new();
    for id in &customer.bill_ids {
        let b = bill(db, id)?;
        if b.status == "Awaiting Payment" {
            out.push(b);
        }
    }
    Ok(out)
}

fn target_line<'a>(db: &'a mut TelecomDb, customer_id: &str, line_id: &str) -> Result<&'a mut Line, ToolError> {
    if !customer(db, customer_id)?.line_ids.iter().any(|l| l == line_id) {
        return Err(ToolError::new(format!("Line {line_id} not found for customer {customer_id}")));
    }
    line_by_id(db, line_id)?;
    Ok(db.lines.iter_mut().find(|l| l.line_id == line_id).expect("checked"))
}

fn details(db: &TelecomDb, id: &str) -> ToolResult {
    if id.starts_with('L') {
        line_by_id(db, id).map(model)
    } else if id.starts_with('D') {
        db.devices
            .iter()
            .find(|d| d.device_id == id)
            .map(model)
            .ok_or_else(|| ToolError::new(format!("Device with ID {id} not found")))
    } else if id.starts_with('B') {
        bill(db, id).map(model)
    } else if id.starts_with('C') {
        customer(db, id).map(model)
    } else if id.starts_with('P') {
        plan(db, id).map(model)
    } else {
        Err(ToolError::new(format!("Unknown ID format or type: {id}")))
    }
}

fn message_and_line(message: &str, line: &Line) -> Out {
    Out::Json(Py::Dict(vec![("message".into(), Py::Str(message.into())), ("line".into(), Py::from_serialize(line))]))
}

fn suspend_line(db: &mut TelecomDb, args: &Args) -> ToolResult {
    let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
    args.str("reason")?;
    let line = target_line(db, &customer_id, &line_id)?;
    if line.status != "Active" {
        return Err(ToolError::new("Line must be active to suspend"));
    }
    line.status = "Suspended".into();
    line.suspension_start_date = Some(TODAY.into());
    Ok(message_and_line("Line suspended successfully. $5/month holding fee will apply.", line))
}

fn resume_line(db: &mut TelecomDb, args: &Args) -> ToolResult {
    let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
    let line = target_line(db, &customer_id, &line_id)?;
    if line.status != "Suspended" && line.status != "Pending Activation" {
        return Err(ToolError::new("Line must be suspended to resume"));
    }
    line.status = "Active".into();
    line.suspension_start_date = None;
    Ok(message_and_line("Line resumed successfully", line))
}

fn bills_for_customer(db: &TelecomDb, args: &Args) -> ToolResult {
    let customer_id = args.str("customer_id")?;
    let limit = if args.get("limit").is_some() { args.int("limit")? } else { 12 };
    let customer = customer(db, &customer_id)?;
    let mut bills = customer.bill_ids.iter().map(|id| bill(db, id)).collect::<Result<Vec<_>, _>>()?;
    // Python's sort with reverse=True is stable: equal dates keep their order.
    bills.sort_by(|a, b| b.issue_date.cmp(&a.issue_date));
    let len = bills.len() as i64;
    let end = if limit < 0 { (len + limit).max(0) } else { limit.min(len) };
    bills.truncate(end as usize);
    Ok(model(&bills))
}

fn send_payment_request(db: &mut TelecomDb, args: &Args) -> ToolResult {
    let (customer_id, bill_id) = (args.str("customer_id")?, args.str("bill_id")?);
    let customer = customer(db, &customer_id)?;
    if !awaiting_payment(db, customer)?.is_empty() {
        return Err(ToolError::new("A bill is already awaiting payment for this customer"));
    }
    if !customer.bill_ids.contains(&bill_id) {
        return Err(ToolError::new(format!("Bill {bill_id} not found for customer {customer_id}")));
    }
    let bill = bill_mut(db, &bill_id)?;
    bill.status = "Awaiting Payment".into();
    Ok(Out::Str(format!("Payment request sent to the customer for bill {}", bill.bill_id)))
}

fn data_usage(db: &mut TelecomDb, args: &Args) -> ToolResult {
    let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
    let line = target_line(db, &customer_id, &line_id)?.clone();
    let plan = plan(db, &line.plan_id)?;
    // A plain dict goes through tau2's `_process`, which turns its numbers into `str`s.
    Ok(Out::Json(Py::Dict(vec![
        ("line_id".into(), Py::Str(line_id)),
        ("data_used_gb".into(), Py::Str(float_repr(line.data_used_gb))),
        ("data_limit_gb".into(), Py::Str(float_repr(plan.data_limit_gb))),
        ("data_refueling_gb".into(), Py::Str(float_repr(line.data_refueling_gb))),
        // The last day of "today's" month.
        ("cycle_end_date".into(), Py::Str("2025-02-28".into())),
    ])))
}

fn set_roaming(db: &mut TelecomDb, args: &Args, on: bool) -> ToolResult {
    let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
    let line = target_line(db, &customer_id, &line_id)?;
    let word = if on { "enabled" } else { "disabled" };
    if line.roaming_enabled == on {
        return Ok(Out::Str(format!("Roaming was already {word}")));
    }
    line.roaming_enabled = on;
    Ok(Out::Str(format!("Roaming {word} successfully")))
}

fn refuel_data(db: &mut TelecomDb, args: &Args) -> ToolResult {
    let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
    let gb = args.num("gb_amount")?;
    let line = target_line(db, &customer_id, &line_id)?;
    if gb.as_f64() <= 0.0 {
        return Err(ToolError::new("Refuel amount must be positive"));
    }
    let plan_id = line.plan_id.clone();
    let rate = plan(db, &plan_id)?.data_refueling_price_per_gb;
    let charge = gb.as_f64() * rate;
    let line = target_line(db, &customer_id, &line_id)?;
    line.data_refueling_gb += gb.as_f64();
    let new_total = line.data_refueling_gb;
    apply_one_time_charge(
        db,
        &customer_id,
        charge,
        &format!("Data refueling: {} GB at ${}/GB", gb.py_str(), Num::Float(rate).py_str()),
    )?;
    Ok(Out::Json(Py::Dict(vec![
        (
            "message".into(),
            Py::Str(format!("Successfully added {} GB of data for line {line_id} for ${charge:.2}", gb.py_str())),
        ),
        ("new_data_refueling_gb".into(), Py::Str(float_repr(new_total))),
        ("charge".into(), Py::Str(float_repr(charge))),
    ])))
}

/// Adds a charge to the customer's first draft bill, creating one for next month if needed.
fn apply_one_time_charge(
    db: &mut TelecomDb,
    customer_id: &str,
    amount: f64,
    description: &str,
) -> Result<(), ToolError> {
    let customer = customer(db, customer_id)?.clone();
    let mut draft = None;
    for id in &customer.bill_ids {
        if bill(db, id)?.status == "Draft" {
            draft = Some(id.clone());
            break;
        }
    }
    let draft = match draft {
        Some(id) => id,
        None => {
            let seed = format!("{customer_id}:{}", db.bills.len());
            let id = format!("B{}", &crate::hash::sha256_hex(&seed)[..8]);
            db.bills.push(Bill {
                bill_id: id.clone(),
                customer_id: customer_id.to_owned(),
                period_start: "2025-03-01".into(),
                period_end: "2025-03-31".into(),
                issue_date: "2025-03-01".into(),
                total_due: 0.0,
                due_date: "2025-03-15".into(),
                line_items: Vec::new(),
                status: "Draft".into(),
            });
            customer_mut(db, customer_id)?.bill_ids.push(id.clone());
            id
        }
    };
    let bill = bill_mut(db, &draft)?;
    bill.line_items.push(LineItem {
        description: description.to_owned(),
        amount,
        date: TODAY.into(),
        item_type: if amount < 0.0 { "Credit" } else { "Charge" }.into(),
    });
    bill.total_due += amount;
    Ok(())
}

fn suspend_for_overdue(db: &mut TelecomDb, args: &Args) -> ToolResult {
    let (customer_id, line_id) = (args.str("customer_id")?, args.str("line_id")?);
    let new_bill_id = args.str("new_bill_id")?;
    let contract_ended = args.bool("contract_ended")?;
    let line = line_by_id(db, &line_id)?;
    if line.status != "Active" {
        return Err(ToolError::new("Line must be active to suspend for unpaid bill"));
    }
    let amount = plan(db, &line.plan_id)?.price_per_month;
    if amount <= 0.0 {
        return Err(ToolError::new("Amount must be positive for overdue bill"));
    }
    let customer = customer(db, &customer_id)?;
    for id in &customer.bill_ids {
        if bill(db, id)?.status == "Overdue" {
            return Err(ToolError::new("Customer already has an overdue bill"));
        }
    }
    db.bills.push(Bill {
        bill_id: new_bill_id.clone(),
        customer_id: customer_id.clone(),
        period_start: "2025-01-01".into(),
        period_end: "2025-01-31".into(),
        issue_date: "2025-01-01".into(),
        total_due: amount,
        due_date: "2025-01-15".into(),
        line_items: vec![LineItem {
            description: format!("Charge for line {line_id}"),
            amount,
            date: TODAY.into(),
            item_type: "Charge".into(),
        }],
        status: "Overdue".into(),
    });
    customer_mut(db, &customer_id)?.bill_ids.push(new_bill_id.clone());
    let line = db.lines.iter_mut().find(|l| l.line_id == line_id).expect("checked");
    line.status = "Suspended".into();
    line.suspension_start_date = Some(TODAY.into());
    if contract_ended {
        line.contract_end_date = Some("2025-01-31".into());
    }
    let ended = if contract_ended { "True" } else { "False" };
    Ok(Out::Str(format!("Line {line_id} suspended for unpaid bill {new_bill_id}. Contract ended: {ended}")))
}
