//! The retail database models in tau2's pydantic field order; `Order`'s optional fields are
//! always dumped (as `null` when unset), as `model_dump()` does.

use serde::{Deserialize, Serialize};

use crate::args::Num;
use crate::ordered_map::OrderedMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    pub item_id: String,
    pub options: OrderedMap<String>,
    pub available: bool,
    pub price: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Product {
    pub name: String,
    pub product_id: String,
    pub variants: OrderedMap<Variant>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserName {
    pub first_name: String,
    pub last_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserAddress {
    pub address1: String,
    pub address2: String,
    pub city: String,
    pub country: String,
    pub state: String,
    pub zip: String,
}

/// `CreditCard | GiftCard | Paypal`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentMethod {
    pub source: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brand: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_four: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<f64>,
}

impl PaymentMethod {
    pub fn is_gift_card(&self) -> bool {
        self.source == "gift_card"
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    pub user_id: String,
    pub name: UserName,
    pub address: UserAddress,
    pub email: String,
    pub payment_methods: OrderedMap<PaymentMethod>,
    pub orders: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderFulfillment {
    pub tracking_id: Vec<String>,
    pub item_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderItem {
    pub name: String,
    pub product_id: String,
    pub item_id: String,
    pub price: f64,
    pub options: OrderedMap<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderPayment {
    pub transaction_type: String,
    pub amount: f64,
    pub payment_method_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub user_id: String,
    pub address: UserAddress,
    pub items: Vec<OrderItem>,
    pub status: String,
    pub fulfillments: Vec<OrderFulfillment>,
    pub payment_history: Vec<OrderPayment>,
    #[serde(default)]
    pub cancel_reason: Option<String>,
    #[serde(default)]
    pub exchange_items: Option<Vec<String>>,
    #[serde(default)]
    pub exchange_new_items: Option<Vec<String>>,
    #[serde(default)]
    pub exchange_payment_method_id: Option<String>,
    /// Assigned without validation in tau2, so an int stays an int.
    #[serde(default)]
    pub exchange_price_difference: Option<Num>,
    #[serde(default)]
    pub return_items: Option<Vec<String>>,
    #[serde(default)]
    pub return_payment_method_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetailDb {
    pub products: OrderedMap<Product>,
    pub users: OrderedMap<User>,
    pub orders: OrderedMap<Order>,
}
