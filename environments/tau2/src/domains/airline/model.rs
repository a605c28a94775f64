//! The airline database models, field for field and in tau2's pydantic order (which is not
//! always the order of `db.json`: flights there list `origin` before `flight_number`). Unions
//! (payment methods, flight statuses) are one struct whose variant-only fields are omitted when
//! absent, which reproduces each variant's dump.

use serde::{Deserialize, Serialize};

use crate::ordered_map::OrderedMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Name {
    pub first_name: String,
    pub last_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Address {
    pub address1: String,
    #[serde(default)]
    pub address2: Option<String>,
    pub city: String,
    pub country: String,
    pub state: String,
    pub zip: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payment {
    pub payment_id: String,
    pub amount: i64,
}

/// `CreditCard | GiftCard | Certificate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentMethod {
    pub source: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brand: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_four: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passenger {
    pub first_name: String,
    pub last_name: String,
    pub dob: String,
}

/// One of tau2's six `FlightDateStatus` variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlightDateStatus {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_seats: Option<OrderedMap<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<OrderedMap<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_departure_time_est: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_departure_time_est: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_arrival_time_est: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_arrival_time_est: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flight {
    pub flight_number: String,
    pub origin: String,
    pub destination: String,
    pub scheduled_departure_time_est: String,
    pub scheduled_arrival_time_est: String,
    pub dates: OrderedMap<FlightDateStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectFlight {
    pub flight_number: String,
    pub origin: String,
    pub destination: String,
    pub status: String,
    pub scheduled_departure_time_est: String,
    pub scheduled_arrival_time_est: String,
    pub date: Option<String>,
    pub available_seats: OrderedMap<i64>,
    pub prices: OrderedMap<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationFlight {
    pub flight_number: String,
    pub origin: String,
    pub destination: String,
    pub date: String,
    pub price: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    pub user_id: String,
    pub name: Name,
    pub address: Address,
    pub email: String,
    pub dob: String,
    pub payment_methods: OrderedMap<PaymentMethod>,
    pub saved_passengers: Vec<Passenger>,
    pub membership: String,
    pub reservations: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    pub reservation_id: String,
    pub user_id: String,
    pub origin: String,
    pub destination: String,
    pub flight_type: String,
    pub cabin: String,
    pub flights: Vec<ReservationFlight>,
    pub passengers: Vec<Passenger>,
    pub payment_history: Vec<Payment>,
    pub created_at: String,
    pub total_baggages: i64,
    pub nonfree_baggages: i64,
    pub insurance: String,
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlightDb {
    pub flights: OrderedMap<Flight>,
    pub users: OrderedMap<User>,
    pub reservations: OrderedMap<Reservation>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AirportCode {
    pub iata: &'static str,
    pub city: &'static str,
}
