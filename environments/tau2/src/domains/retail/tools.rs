//! tau2's `RetailTools`, function by function, with its checks, messages and quirks kept (for
//! example `modify_pending_order_items` prices every modified item at the last new variant's
//! price, and `cancel_pending_order` refunds gift cards as it goes).

use super::model::{Order, OrderPayment, PaymentMethod, RetailDb, User, UserAddress, Variant};
use crate::args::{Args, Num};
use crate::domains::model;
use crate::fold::{fold_for_match, folds_to};
use crate::pyjson::{Py, round2};
use crate::toolkit::{Out, ToolError, ToolResult};

pub fn call(db: &mut RetailDb, name: &str, args: &Args) -> Option<ToolResult> {
    Some(match name {
        "calculate" => args.str("expression").and_then(|e| crate::calc::calculate(&e)).map(Out::Str),
        "cancel_pending_order" => cancel_pending_order(db, args),
        "exchange_delivered_order_items" => exchange_delivered(db, args),
        "find_user_id_by_name_zip" => (|| {
            let first = fold_for_match(&args.str("first_name")?);
            let last = fold_for_match(&args.str("last_name")?);
            let zip = args.str("zip")?;
            db.users
                .iter()
                .find(|(_, u)| {
                    folds_to(&u.name.first_name, &first) && folds_to(&u.name.last_name, &last) && u.address.zip == zip
                })
                .map(|(id, _)| Out::Str(id.clone()))
                .ok_or_else(|| ToolError::new("User not found"))
        })(),
        "find_user_id_by_email" => (|| {
            let wanted = fold_for_match(&args.str("email")?);
            db.users
                .iter()
                .find(|(_, u)| folds_to(&u.email, &wanted))
                .map(|(id, _)| Out::Str(id.clone()))
                .ok_or_else(|| ToolError::new("User not found"))
        })(),
        "get_order_details" => args.str("order_id").and_then(|id| order(db, &id).map(model)),
        "get_product_details" => args
            .str("product_id")
            .and_then(|id| db.products.get(&id).map(model).ok_or_else(|| ToolError::new("Product not found"))),
        "get_item_details" => args.str("item_id").and_then(|id| {
            db.products
                .values()
                .find_map(|p| p.variants.get(&id))
                .map(model)
                .ok_or_else(|| ToolError::new("Item not found"))
        }),
        "get_user_details" => args.str("user_id").and_then(|id| user(db, &id).map(model)),
        "list_all_product_types" => {
            let types =
                Py::Dict(db.products.values().map(|p| (p.name.clone(), Py::Str(p.product_id.clone()))).collect());
            Ok(Out::Str(types.dumps_sorted()))
        }
        "modify_pending_order_address" => modify_order_address(db, args),
        "modify_pending_order_items" => modify_pending_items(db, args),
        "modify_pending_order_payment" => modify_pending_payment(db, args),
        "modify_user_address" => modify_user_address(db, args),
        "return_delivered_order_items" => return_delivered(db, args),
        "transfer_to_human_agents" => Ok(Out::Str("Transfer successful".into())),
        _ => return None,
    })
}

fn order<'a>(db: &'a RetailDb, id: &str) -> Result<&'a Order, ToolError> {
    db.orders.get(id).ok_or_else(|| ToolError::new("Order not found"))
}

fn user<'a>(db: &'a RetailDb, id: &str) -> Result<&'a User, ToolError> {
    db.users.get(id).ok_or_else(|| ToolError::new("User not found"))
}

fn payment_method<'a>(db: &'a RetailDb, user_id: &str, id: &str) -> Result<&'a PaymentMethod, ToolError> {
    user(db, user_id)?.payment_methods.get(id).ok_or_else(|| ToolError::new("Payment method not found"))
}

fn variant<'a>(db: &'a RetailDb, product_id: &str, variant_id: &str) -> Result<&'a Variant, ToolError> {
    let product = db.products.get(product_id).ok_or_else(|| ToolError::new("Product not found"))?;
    product.variants.get(variant_id).ok_or_else(|| ToolError::new("Variant not found"))
}

/// Adds `delta` to a gift card's balance and rounds it to cents, as tau2 does after each change.
fn add_to_gift_card(db: &mut RetailDb, user_id: &str, method_id: &str, delta: f64) {
    if let Some(method) = db.users.get_mut(user_id).and_then(|u| u.payment_methods.get_mut(method_id))
        && method.is_gift_card()
    {
        method.balance = Some(round2(method.balance.unwrap_or(0.0) + delta));
    }
}

/// Whether `wanted` (with repeats) is contained in `available` (with repeats).
fn all_present(wanted: &[String], available: &[String]) -> Option<String> {
    wanted
        .iter()
        .find(|id| wanted.iter().filter(|w| w == id).count() > available.iter().filter(|a| a == id).count())
        .cloned()
}

fn cancel_pending_order(db: &mut RetailDb, args: &Args) -> ToolResult {
    let order_id = args.str("order_id")?;
    let reason = args.str("reason")?;
    let current = order(db, &order_id)?.clone();
    if current.status != "pending" {
        return Err(ToolError::new("Non-pending order cannot be cancelled"));
    }
    if reason != "no longer needed" && reason != "ordered by mistake" {
        return Err(ToolError::new("Invalid reason"));
    }
    let mut refunds = Vec::new();
    for payment in &current.payment_history {
        refunds.push(OrderPayment {
            transaction_type: "refund".into(),
            amount: payment.amount,
            payment_method_id: payment.payment_method_id.clone(),
        });
        let user_id = user(db, &current.user_id)?.user_id.clone();
        let is_gift_card = payment_method(db, &user_id, &payment.payment_method_id)?.is_gift_card();
        if is_gift_card {
            add_to_gift_card(db, &user_id, &payment.payment_method_id, payment.amount);
        }
    }
    let order = db.orders.get_mut(&order_id).expect("checked");
    order.status = "cancelled".into();
    order.cancel_reason = Some(reason);
    order.payment_history.extend(refunds);
    Ok(model(order))
}

/// The price difference of swapping `item_ids` for `new_item_ids` in `order`, with tau2's checks.
fn price_difference(
    db: &RetailDb,
    order: &Order,
    item_ids: &[String],
    new_item_ids: &[String],
    refuse_same: bool,
) -> Result<(Num, Option<Variant>), ToolError> {
    let mut diff = Num::Int(0);
    let mut last_variant = None;
    for (item_id, new_item_id) in item_ids.iter().zip(new_item_ids) {
        if refuse_same && item_id == new_item_id {
            return Err(ToolError::new("The new item id should be different from the old item id"));
        }
        let item = order
            .items
            .iter()
            .find(|i| &i.item_id == item_id)
            .ok_or_else(|| ToolError::new(format!("Item {item_id} not found")))?;
        let variant = variant(db, &item.product_id, new_item_id)?;
        if !variant.available {
            return Err(ToolError::new(format!("New item {new_item_id} not found or available")));
        }
        diff = Num::Float(diff.as_f64() + (variant.price - item.price));
        last_variant = Some(variant.clone());
    }
    Ok((diff, last_variant))
}

fn exchange_delivered(db: &mut RetailDb, args: &Args) -> ToolResult {
    let order_id = args.str("order_id")?;
    let current = order(db, &order_id)?.clone();
    if current.status != "delivered" {
        return Err(ToolError::new("Non-delivered order cannot be exchanged"));
    }
    let item_ids = args.str_list("item_ids")?;
    let new_item_ids = args.str_list("new_item_ids")?;
    let all: Vec<String> = current.items.iter().map(|i| i.item_id.clone()).collect();
    if let Some(missing) = all_present(&item_ids, &all) {
        return Err(ToolError::new(format!("Number of {missing} not found.")));
    }
    if item_ids.len() != new_item_ids.len() {
        return Err(ToolError::new("The number of items to be exchanged should match."));
    }
    let (diff, _) = price_difference(db, &current, &item_ids, &new_item_ids, false)?;
    let diff = match diff {
        Num::Float(f) => Num::Float(round2(f)),
        int => int,
    };
    let payment_method_id = args.str("payment_method_id")?;
    let method = payment_method(db, &current.user_id, &payment_method_id)?;
    if method.is_gift_card() && method.balance.unwrap_or(0.0) < diff.as_f64() {
        return Err(ToolError::new("Insufficient gift card balance to pay for the price difference"));
    }
    let order = db.orders.get_mut(&order_id).expect("checked");
    order.status = "exchange requested".into();
    order.exchange_items = Some(sorted(item_ids));
    order.exchange_new_items = Some(sorted(new_item_ids));
    order.exchange_payment_method_id = Some(payment_method_id);
    order.exchange_price_difference = Some(diff);
    Ok(model(order))
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn address(args: &Args) -> Result<UserAddress, ToolError> {
    Ok(UserAddress {
        address1: args.str("address1")?,
        address2: args.str("address2")?,
        city: args.str("city")?,
        country: args.str("country")?,
        state: args.str("state")?,
        zip: args.str("zip")?,
    })
}

fn modify_order_address(db: &mut RetailDb, args: &Args) -> ToolResult {
    let order_id = args.str("order_id")?;
    if !order(db, &order_id)?.status.contains("pending") {
        return Err(ToolError::new("Non-pending order cannot be modified"));
    }
    let address = address(args)?;
    let order = db.orders.get_mut(&order_id).expect("checked");
    order.address = address;
    Ok(model(order))
}

fn modify_pending_items(db: &mut RetailDb, args: &Args) -> ToolResult {
    let order_id = args.str("order_id")?;
    let current = order(db, &order_id)?.clone();
    if current.status != "pending" {
        return Err(ToolError::new("Non-pending order cannot be modified"));
    }
    let item_ids = args.str_list("item_ids")?;
    let new_item_ids = args.str_list("new_item_ids")?;
    let all: Vec<String> = current.items.iter().map(|i| i.item_id.clone()).collect();
    if let Some(missing) = all_present(&item_ids, &all) {
        return Err(ToolError::new(format!("{missing} not found")));
    }
    if item_ids.len() != new_item_ids.len() {
        return Err(ToolError::new("The number of items to be exchanged should match"));
    }
    let (diff, last_variant) = price_difference(db, &current, &item_ids, &new_item_ids, true)?;
    let diff = diff.as_f64();
    let payment_method_id = args.str("payment_method_id")?;
    let is_gift_card = {
        let method = payment_method(db, &current.user_id, &payment_method_id)?;
        if method.is_gift_card() && method.balance.unwrap_or(0.0) < diff {
            return Err(ToolError::new("Insufficient gift card balance to pay for the new item"));
        }
        method.is_gift_card()
    };
    if is_gift_card {
        add_to_gift_card(db, &current.user_id, &payment_method_id, -diff);
    }
    let order = db.orders.get_mut(&order_id).expect("checked");
    order.payment_history.push(OrderPayment {
        transaction_type: if diff > 0.0 { "payment" } else { "refund" }.into(),
        amount: diff.abs(),
        payment_method_id,
    });
    for (item_id, new_item_id) in item_ids.iter().zip(&new_item_ids) {
        let item = order
            .items
            .iter_mut()
            .find(|i| &i.item_id == item_id)
            .ok_or_else(|| ToolError::new(format!("Item {item_id} not found")))?;
        item.item_id = new_item_id.clone();
        if let Some(variant) = &last_variant {
            item.price = variant.price;
            item.options = variant.options.clone();
        }
    }
    order.status = "pending (item modified)".into();
    Ok(model(order))
}

fn modify_pending_payment(db: &mut RetailDb, args: &Args) -> ToolResult {
    let order_id = args.str("order_id")?;
    let payment_method_id = args.str("payment_method_id")?;
    let current = order(db, &order_id)?.clone();
    if !current.status.contains("pending") {
        return Err(ToolError::new("Non-pending order cannot be modified"));
    }
    let new_is_gift_card = payment_method(db, &current.user_id, &payment_method_id)?.is_gift_card();
    let new_balance = payment_method(db, &current.user_id, &payment_method_id)?.balance.unwrap_or(0.0);
    if current.payment_history.len() != 1 || current.payment_history[0].transaction_type != "payment" {
        return Err(ToolError::new("There should be exactly one payment for a pending order"));
    }
    let old_method_id = current.payment_history[0].payment_method_id.clone();
    if old_method_id == payment_method_id {
        return Err(ToolError::new("The new payment method should be different from the current one"));
    }
    let amount = current.payment_history[0].amount;
    if new_is_gift_card && new_balance < amount {
        return Err(ToolError::new("Insufficient gift card balance to pay for the order"));
    }
    let order = db.orders.get_mut(&order_id).expect("checked");
    order.payment_history.push(OrderPayment {
        transaction_type: "payment".into(),
        amount,
        payment_method_id: payment_method_id.clone(),
    });
    order.payment_history.push(OrderPayment {
        transaction_type: "refund".into(),
        amount,
        payment_method_id: old_method_id.clone(),
    });
    if new_is_gift_card {
        add_to_gift_card(db, &current.user_id, &payment_method_id, -amount);
    }
    // tau2 looks the old method up after the change; a missing one raises after the update.
    let old_is_gift_card = payment_method(db, &current.user_id, &old_method_id)?.is_gift_card();
    if old_is_gift_card {
        add_to_gift_card(db, &current.user_id, &old_method_id, amount);
    }
    Ok(model(db.orders.get(&order_id).expect("checked")))
}

fn modify_user_address(db: &mut RetailDb, args: &Args) -> ToolResult {
    let user_id = args.str("user_id")?;
    user(db, &user_id)?;
    let address = address(args)?;
    let user = db.users.get_mut(&user_id).expect("checked");
    user.address = address;
    Ok(model(user))
}

fn return_delivered(db: &mut RetailDb, args: &Args) -> ToolResult {
    let order_id = args.str("order_id")?;
    let current = order(db, &order_id)?.clone();
    if current.status != "delivered" {
        return Err(ToolError::new("Non-delivered order cannot be returned"));
    }
    let user_id = user(db, &current.user_id)?.user_id.clone();
    let payment_method_id = args.str("payment_method_id")?;
    let method = payment_method(db, &user_id, &payment_method_id)?;
    let original = current.payment_history.first().map(|p| p.payment_method_id.as_str());
    if !method.is_gift_card() && Some(payment_method_id.as_str()) != original {
        if original.is_none() {
            return Err(ToolError::new("list index out of range"));
        }
        return Err(ToolError::new("Payment method should be the original payment method"));
    }
    let item_ids = args.str_list("item_ids")?;
    let all: Vec<String> = current.items.iter().map(|i| i.item_id.clone()).collect();
    if all_present(&item_ids, &all).is_some() {
        return Err(ToolError::new("Some item not found"));
    }
    let order = db.orders.get_mut(&order_id).expect("checked");
    order.status = "return requested".into();
    order.return_items = Some(sorted(item_ids));
    order.return_payment_method_id = Some(payment_method_id);
    Ok(model(order))
}
