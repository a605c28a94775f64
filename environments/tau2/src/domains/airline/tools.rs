//! tau2's `AirlineTools`, function by function: the same checks in the same order, the same
//! messages, the same (sometimes surprising) effects, such as `update_reservation_flights`
//! not touching seat counts and `cancel_reservation` not releasing them. Lookups of users,
//! reservations and flights tolerate case and accents, as tau2's do.

use serde_json::Value;

use super::model::{
    AirportCode, DirectFlight, FlightDateStatus, FlightDb, Passenger, Payment, PaymentMethod, Reservation,
    ReservationFlight,
};
use crate::args::{Args, Num, py_type};
use crate::domains::model;
use crate::fold::{fold_for_match, folds_to};
use crate::ordered_map::OrderedMap;
use crate::toolkit::{Out, ToolError, ToolResult};

pub fn call(db: &mut FlightDb, name: &str, args: &Args) -> Option<ToolResult> {
    Some(match name {
        "book_reservation" => book_reservation(db, args),
        "calculate" => args.str("expression").and_then(|e| crate::calc::calculate(&e)).map(Out::Str),
        "cancel_reservation" => cancel_reservation(db, args),
        "get_reservation_details" => args.str("reservation_id").and_then(|id| {
            let key = resolve(&db.reservations, &id).ok_or_else(|| not_found("Reservation", &id))?;
            Ok(model(db.reservations.get(&key).expect("resolved")))
        }),
        "get_user_details" => args.str("user_id").and_then(|id| {
            let key = resolve(&db.users, &id).ok_or_else(|| not_found("User", &id))?;
            Ok(model(db.users.get(&key).expect("resolved")))
        }),
        "list_all_airports" => {
            Ok(model(&AIRPORTS.iter().map(|(iata, city)| AirportCode { iata, city }).collect::<Vec<_>>()))
        }
        "search_direct_flight" => (|| {
            let (origin, destination, date) = (args.str("origin")?, args.str("destination")?, args.str("date")?);
            Ok(model(&search_direct(db, &date, Some(&origin), Some(&destination), None)))
        })(),
        "search_onestop_flight" => search_onestop(db, args),
        "send_certificate" => send_certificate(db, args),
        "transfer_to_human_agents" => Ok(Out::Str("Transfer successful".into())),
        "update_reservation_baggages" => update_baggages(db, args),
        "update_reservation_flights" => update_flights(db, args),
        "update_reservation_passengers" => update_passengers(db, args),
        "get_flight_status" => (|| {
            let (number, date) = (args.str("flight_number")?, args.str("date")?);
            Ok(Out::Str(flight_instance(db, &number, &date)?.status.clone()))
        })(),
        _ => return None,
    })
}

const AIRPORTS: [(&str, &str); 20] = [
    ("SFO", "San Francisco"),
    ("JFK", "New York"),
    ("LAX", "Los Angeles"),
    ("ORD", "Chicago"),
    ("DFW", "Dallas"),
    ("DEN", "Denver"),
    ("SEA", "Seattle"),
    ("ATL", "Atlanta"),
    ("MIA", "Miami"),
    ("BOS", "Boston"),
    ("PHX", "Phoenix"),
    ("IAH", "Houston"),
    ("LAS", "Las Vegas"),
    ("MCO", "Orlando"),
    ("EWR", "Newark"),
    ("CLT", "Charlotte"),
    ("MSP", "Minneapolis"),
    ("DTW", "Detroit"),
    ("PHL", "Philadelphia"),
    ("LGA", "LaGuardia"),
];

fn not_found(kind: &str, id: &str) -> ToolError {
    ToolError::new(format!("{kind} {id} not found"))
}

/// tau2's `_resolve_key_folded`: exact, then stripped, then case- and accent-folded.
fn resolve<V>(map: &OrderedMap<V>, key: &str) -> Option<String> {
    if map.contains_key(key) {
        return Some(key.to_owned());
    }
    let stripped = key.trim();
    if map.contains_key(stripped) {
        return Some(stripped.to_owned());
    }
    let folded = fold_for_match(stripped);
    map.keys().find(|k| folds_to(k, &folded)).cloned()
}

fn flight_instance<'a>(db: &'a FlightDb, number: &str, date: &str) -> Result<&'a FlightDateStatus, ToolError> {
    let key = resolve(&db.flights, number).ok_or_else(|| not_found("Flight", number))?;
    let flight = db.flights.get(&key).expect("resolved");
    flight.dates.get(date).ok_or_else(|| ToolError::new(format!("Flight {number} not found on date {date}")))
}

fn search_direct(
    db: &FlightDb,
    date: &str,
    origin: Option<&str>,
    destination: Option<&str>,
    leave_after: Option<&str>,
) -> Vec<DirectFlight> {
    db.flights
        .values()
        .filter_map(|f| {
            let day = f.dates.get(date)?;
            let ok = origin.is_none_or(|o| f.origin == o)
                && destination.is_none_or(|d| f.destination == d)
                && day.status == "available"
                && leave_after.is_none_or(|t| f.scheduled_departure_time_est.as_str() >= t);
            ok.then(|| DirectFlight {
                flight_number: f.flight_number.clone(),
                origin: f.origin.clone(),
                destination: f.destination.clone(),
                status: "available".into(),
                scheduled_departure_time_est: f.scheduled_departure_time_est.clone(),
                scheduled_arrival_time_est: f.scheduled_arrival_time_est.clone(),
                date: None,
                available_seats: day.available_seats.clone().unwrap_or_default(),
                prices: day.prices.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn search_onestop(db: &FlightDb, args: &Args) -> ToolResult {
    let (origin, destination, date) = (args.str("origin")?, args.str("destination")?, args.str("date")?);
    let mut results: Vec<[DirectFlight; 2]> = Vec::new();
    for mut first in search_direct(db, &date, Some(&origin), None, None) {
        first.date = Some(date.clone());
        let date2 = if first.scheduled_arrival_time_est.contains("+1") {
            let tail: String = date.chars().rev().take(2).collect::<Vec<_>>().into_iter().rev().collect();
            let day: i64 = tail
                .trim()
                .parse()
                .map_err(|_| ToolError::new(format!("invalid literal for int() with base 10: '{tail}'")))?;
            format!("2024-05-{}", day + 1)
        } else {
            date.clone()
        };
        for mut second in search_direct(
            db,
            &date2,
            Some(&first.destination),
            Some(&destination),
            Some(&first.scheduled_arrival_time_est),
        ) {
            second.date = Some(date2.clone());
            results.push([first.clone(), second]);
        }
    }
    Ok(model(&results))
}

/// A list argument of nested models as tau2's airline tools take it: `if all(isinstance(x, dict)
/// for x in xs)` converts every item to its model; otherwise the list stays as the model sent it
/// (`Err` here) and Python fails later, where an item is first used as a model.
type Items<T> = Result<Vec<T>, Vec<Value>>;

fn items<T>(
    args: &Args,
    name: &str,
    convert: impl Fn(&serde_json::Map<String, Value>) -> Result<T, ToolError>,
) -> Result<Items<T>, ToolError> {
    let list = args.list(name)?;
    if !list.iter().all(Value::is_object) {
        return Ok(Err(list));
    }
    list.iter().filter_map(Value::as_object).map(convert).collect::<Result<_, _>>().map(Ok)
}

/// Python's `AttributeError` for the first unconverted item used as a model (`item.<attribute>`).
/// An unconverted list is never empty: `all` of nothing is true.
fn no_attribute(raw: &[Value], attribute: &str) -> ToolError {
    let first = raw.first().map_or("NoneType", py_type);
    ToolError::new(format!("'{first}' object has no attribute '{attribute}'"))
}

/// pydantic's lines for the items of an unconverted list stored in a model's list field: one per
/// item that is not a dict. (A dict among them would be validated as the model; that is left out.)
fn model_type_lines(field: &str, model: &str, raw: &[Value]) -> Vec<String> {
    raw.iter()
        .enumerate()
        .filter(|(_, v)| !v.is_object())
        .map(|(i, v)| {
            format!(
                "{field}.{i}\n  Input should be a valid dictionary or instance of {model} \
                 [type=model_type, input_value={}, input_type={}]",
                py_repr(v),
                py_type(v)
            )
        })
        .collect()
}

/// Python's `repr` of a JSON scalar, as pydantic shows an input.
fn py_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => format!("'{s}'"),
        other => other.to_string(),
    }
}

fn field(object: &serde_json::Map<String, Value>, model: &str, name: &str) -> Result<String, ToolError> {
    match object.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(validation(model, name, "Input should be a valid string", other)),
        None => Err(validation(model, name, "Field required", &Value::Object(object.clone()))),
    }
}

fn int_field(object: &serde_json::Map<String, Value>, model: &str, name: &str) -> Result<i64, ToolError> {
    match object.get(name) {
        Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64().expect("checked")),
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
            Ok(n.as_f64().expect("checked") as i64)
        }
        Some(other) => Err(validation(model, name, "Input should be a valid integer", other)),
        None => Err(validation(model, name, "Field required", &Value::Object(object.clone()))),
    }
}

/// The first lines of a pydantic `ValidationError` (the link to pydantic's docs is left out).
fn validation(model: &str, field: &str, message: &str, input: &Value) -> ToolError {
    validation_errors(model, vec![validation_line(field, message, input)])
}

fn validation_line(field: &str, message: &str, input: &Value) -> String {
    format!("{field}\n  {message} [input_value={input}]")
}

/// One `ValidationError` for every field of a model that failed, in field order, as pydantic
/// reports them together.
fn validation_errors(model: &str, lines: Vec<String>) -> ToolError {
    let s = if lines.len() == 1 { "" } else { "s" };
    ToolError::new(format!("{} validation error{s} for {model}\n{}", lines.len(), lines.join("\n")))
}

fn literal(name: &str, value: &str, allowed: &[&str]) -> Option<String> {
    if allowed.contains(&value) {
        return None;
    }
    let options: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    let expected = match options.len() {
        2 => format!("{} or {}", options[0], options[1]),
        n => format!("{} or {}", options[..n - 1].join(", "), options[n - 1]),
    };
    Some(validation_line(name, &format!("Input should be {expected}"), &Value::String(value.to_owned())))
}

fn passengers(args: &Args) -> Result<Items<Passenger>, ToolError> {
    items(args, "passengers", |p| {
        Ok(Passenger {
            first_name: field(p, "Passenger", "first_name")?,
            last_name: field(p, "Passenger", "last_name")?,
            dob: field(p, "Passenger", "dob")?,
        })
    })
}

fn flight_infos(args: &Args) -> Result<Items<(String, String)>, ToolError> {
    items(args, "flights", |f| Ok((field(f, "FlightInfo", "flight_number")?, field(f, "FlightInfo", "date")?)))
}

fn book_reservation(db: &mut FlightDb, args: &Args) -> ToolResult {
    let flights = flight_infos(args)?;
    let passengers = passengers(args)?;
    let payments = items(args, "payment_methods", |p| {
        Ok(Payment { payment_id: field(p, "Payment", "payment_id")?, amount: int_field(p, "Payment", "amount")? })
    })?;
    let requested_user = args.str("user_id")?;
    let user_key = resolve(&db.users, &requested_user).ok_or_else(|| not_found("User", &requested_user))?;
    let reservation_id = ["HATHAT", "HATHAU", "HATHAV"]
        .into_iter()
        .find(|id| !db.reservations.contains_key(id))
        .ok_or_else(|| ToolError::new("Too many reservations"))?
        .to_owned();
    let (flight_type, cabin, insurance) = (args.str("flight_type")?, args.str("cabin")?, args.str("insurance")?);
    // `Reservation(...)` validates its fields together, in field order: the literals and the
    // lists that were left unconverted.
    let mut errors = Vec::new();
    errors.extend(literal("flight_type", &flight_type, &["round_trip", "one_way"]));
    errors.extend(literal("cabin", &cabin, &["business", "economy", "basic_economy"]));
    if let Err(raw) = &passengers {
        errors.extend(model_type_lines("passengers", "Passenger", raw));
    }
    if let Err(raw) = &payments {
        errors.extend(model_type_lines("payment_history", "Payment", raw));
    }
    errors.extend(literal("insurance", &insurance, &["yes", "no"]));
    let (Ok(passengers), Ok(payments)) = (passengers, payments) else {
        return Err(validation_errors("Reservation", errors));
    };
    if !errors.is_empty() {
        return Err(validation_errors("Reservation", errors));
    }
    let flights = flights.map_err(|raw| no_attribute(&raw, "flight_number"))?;
    let nonfree = args.num("nonfree_baggages")?;
    let mut reservation = Reservation {
        reservation_id: reservation_id.clone(),
        user_id: user_key.clone(),
        origin: args.str("origin")?,
        destination: args.str("destination")?,
        flight_type,
        cabin: cabin.clone(),
        flights: Vec::new(),
        passengers: passengers.clone(),
        payment_history: payments.clone(),
        created_at: "2024-05-15T15:00:00".into(),
        total_baggages: args.int("total_baggages")?,
        nonfree_baggages: args.int("nonfree_baggages")?,
        insurance: insurance.clone(),
        status: None,
    };

    let count = passengers.len() as i64;
    let mut total_price: f64 = 0.0;
    let mut booked: Vec<(String, String)> = Vec::new();
    for (number, date) in &flights {
        let key = resolve(&db.flights, number).ok_or_else(|| not_found("Flight", number))?;
        let flight = db.flights.get(&key).expect("resolved");
        let day = flight_instance(db, &flight.flight_number, date)?;
        if day.status != "available" {
            return Err(ToolError::new(format!("Flight {} not available on date {date}", flight.flight_number)));
        }
        let seats = day.available_seats.as_ref().and_then(|s| s.get(&cabin)).copied().unwrap_or(0);
        if seats < count {
            return Err(ToolError::new(format!("Not enough seats on flight {}", flight.flight_number)));
        }
        let price = day.prices.as_ref().and_then(|p| p.get(&cabin)).copied().unwrap_or(0);
        reservation.flights.push(ReservationFlight {
            flight_number: flight.flight_number.clone(),
            origin: flight.origin.clone(),
            destination: flight.destination.clone(),
            date: date.clone(),
            price,
        });
        booked.push((key, date.clone()));
        total_price += (price * count) as f64;
    }
    if insurance == "yes" {
        total_price += (30 * count) as f64;
    }
    total_price += 50.0 * nonfree.as_f64();

    let user = db.users.get(&user_key).expect("resolved");
    for payment in &payments {
        let method = user
            .payment_methods
            .get(&payment.payment_id)
            .ok_or_else(|| ToolError::new(format!("Payment method {} not found", payment.payment_id)))?;
        if matches!(method.source.as_str(), "gift_card" | "certificate")
            && method.amount.unwrap_or(0.0) < payment.amount as f64
        {
            return Err(ToolError::new(format!("Not enough balance in payment method {}", payment.payment_id)));
        }
    }
    let total_payment: i64 = payments.iter().map(|p| p.amount).sum();
    if total_payment as f64 != total_price {
        let total = match nonfree {
            Num::Int(_) => Num::Int(total_price as i64),
            Num::Float(_) => Num::Float(total_price),
        };
        return Err(ToolError::new(format!(
            "Payment amount does not add up, total price is {}, but paid {total_payment}",
            total.py_str()
        )));
    }

    let user = db.users.get_mut(&user_key).expect("resolved");
    for payment in &payments {
        let source = user.payment_methods.get(&payment.payment_id).map(|m| m.source.clone());
        match source.as_deref() {
            Some("gift_card") => {
                let method = user.payment_methods.get_mut(&payment.payment_id).expect("checked");
                method.amount = Some(method.amount.unwrap_or(0.0) - payment.amount as f64);
            }
            Some("certificate") => {
                user.payment_methods.remove(&payment.payment_id);
            }
            _ => {}
        }
    }
    for (key, date) in &booked {
        let day = db.flights.get_mut(key).and_then(|f| f.dates.get_mut(date)).expect("checked");
        if let Some(seats) = day.available_seats.as_mut().and_then(|s| s.get_mut(&cabin)) {
            *seats -= count;
        }
    }
    db.reservations.insert(reservation_id.clone(), reservation.clone());
    db.users.get_mut(&user_key).expect("resolved").reservations.push(reservation_id);
    Ok(model(&reservation))
}

fn reservation_key(db: &FlightDb, args: &Args) -> Result<String, ToolError> {
    let id = args.str("reservation_id")?;
    resolve(&db.reservations, &id).ok_or_else(|| not_found("Reservation", &id))
}

fn cancel_reservation(db: &mut FlightDb, args: &Args) -> ToolResult {
    let key = reservation_key(db, args)?;
    let reservation = db.reservations.get_mut(&key).expect("resolved");
    let refunds: Vec<Payment> = reservation
        .payment_history
        .iter()
        .map(|p| Payment { payment_id: p.payment_id.clone(), amount: -p.amount })
        .collect();
    reservation.payment_history.extend(refunds);
    reservation.status = Some("cancelled".into());
    Ok(model(reservation))
}

/// tau2's `_payment_for_update`: checks, deducts a gift card, and returns the payment to record.
fn payment_for_update(
    db: &mut FlightDb,
    user_key: &str,
    payment_id: &str,
    total_price: i64,
) -> Result<Option<Payment>, ToolError> {
    let user = db.users.get_mut(user_key).expect("resolved");
    let method = user.payment_methods.get_mut(payment_id).ok_or_else(|| ToolError::new("Payment method not found"))?;
    if method.source == "certificate" {
        return Err(ToolError::new("Certificate cannot be used to update reservation"));
    }
    if method.source == "gift_card" && method.amount.unwrap_or(0.0) < total_price as f64 {
        return Err(ToolError::new("Gift card balance is not enough"));
    }
    if method.source == "gift_card" {
        method.amount = Some(method.amount.unwrap_or(0.0) - total_price as f64);
    }
    Ok((total_price != 0).then(|| Payment { payment_id: payment_id.to_owned(), amount: total_price }))
}

fn reservation_user(db: &FlightDb, key: &str) -> Result<String, ToolError> {
    let user_id = &db.reservations.get(key).expect("resolved").user_id;
    resolve(&db.users, user_id).ok_or_else(|| not_found("User", user_id))
}

fn update_baggages(db: &mut FlightDb, args: &Args) -> ToolResult {
    let key = reservation_key(db, args)?;
    let user_key = reservation_user(db, &key)?;
    let total = args.int("total_baggages")?;
    let nonfree = args.int("nonfree_baggages")?;
    let payment_id = args.str("payment_id")?;
    let current = db.reservations.get(&key).expect("resolved").nonfree_baggages;
    let price = 50 * (nonfree - current).max(0);
    let payment = payment_for_update(db, &user_key, &payment_id, price)?;
    let reservation = db.reservations.get_mut(&key).expect("resolved");
    if let Some(payment) = payment {
        reservation.payment_history.push(payment);
    }
    reservation.total_baggages = total;
    reservation.nonfree_baggages = nonfree;
    Ok(model(reservation))
}

fn update_flights(db: &mut FlightDb, args: &Args) -> ToolResult {
    let flights = flight_infos(args)?;
    let key = reservation_key(db, args)?;
    let user_key = reservation_user(db, &key)?;
    let cabin = args.str("cabin")?;
    let payment_id = args.str("payment_id")?;
    let flights = flights.map_err(|raw| no_attribute(&raw, "flight_number"))?;
    let reservation = db.reservations.get(&key).expect("resolved");
    let count = reservation.passengers.len() as i64;
    let mut total_price = 0i64;
    let mut new_flights = Vec::new();
    for (number, date) in &flights {
        let flight_key = resolve(&db.flights, number).ok_or_else(|| not_found("Flight", number))?;
        let flight = db.flights.get(&flight_key).expect("resolved");
        let number = &flight.flight_number;
        if let Some(existing) = reservation
            .flights
            .iter()
            .find(|f| &f.flight_number == number && &f.date == date && cabin == reservation.cabin)
        {
            total_price += existing.price * count;
            new_flights.push(existing.clone());
            continue;
        }
        let day = flight_instance(db, number, date)?;
        if day.status != "available" {
            return Err(ToolError::new(format!("Flight {number} not available on date {date}")));
        }
        if day.available_seats.as_ref().and_then(|s| s.get(&cabin)).copied().unwrap_or(0) < count {
            return Err(ToolError::new(format!("Not enough seats on flight {number}")));
        }
        let price = day
            .prices
            .as_ref()
            .and_then(|p| p.get(&cabin))
            .copied()
            .ok_or_else(|| ToolError::new(format!("'{cabin}'")))?;
        total_price += price * count;
        new_flights.push(ReservationFlight {
            flight_number: number.clone(),
            origin: flight.origin.clone(),
            destination: flight.destination.clone(),
            date: date.clone(),
            price,
        });
    }
    total_price -= reservation.flights.iter().map(|f| f.price).sum::<i64>() * count;
    let payment = payment_for_update(db, &user_key, &payment_id, total_price)?;
    let reservation = db.reservations.get_mut(&key).expect("resolved");
    if let Some(payment) = payment {
        reservation.payment_history.push(payment);
    }
    reservation.flights = new_flights;
    reservation.cabin = cabin;
    Ok(model(reservation))
}

fn update_passengers(db: &mut FlightDb, args: &Args) -> ToolResult {
    let passengers = passengers(args)?;
    let key = reservation_key(db, args)?;
    let reservation = db.reservations.get_mut(&key).expect("resolved");
    if passengers.as_ref().map_or_else(Vec::len, Vec::len) != reservation.passengers.len() {
        return Err(ToolError::new("Number of passengers does not match"));
    }
    // tau2 assigns the unconverted list to the reservation without validating it and then fails
    // to serialize it; a typed database cannot hold such passengers, so the call is refused.
    reservation.passengers = passengers.map_err(|raw| {
        ToolError::new(format!(
            "passengers must all be objects (got {}); tau2 would store them unvalidated",
            py_type(raw.iter().find(|v| !v.is_object()).unwrap_or(&Value::Null))
        ))
    })?;
    Ok(model(reservation))
}

fn send_certificate(db: &mut FlightDb, args: &Args) -> ToolResult {
    let user_id = args.str("user_id")?;
    let amount = args.num("amount")?;
    let key = resolve(&db.users, &user_id).ok_or_else(|| not_found("User", &user_id))?;
    let user = db.users.get_mut(&key).expect("resolved");
    for id in [3221322, 3221323, 3221324] {
        let payment_id = format!("certificate_{id}");
        if !user.payment_methods.contains_key(&payment_id) {
            user.payment_methods.insert(
                payment_id.clone(),
                PaymentMethod {
                    source: "certificate".into(),
                    id: payment_id.clone(),
                    brand: None,
                    last_four: None,
                    amount: Some(amount.as_f64()),
                },
            );
            return Ok(Out::Str(format!(
                "Certificate {payment_id} added to user {user_id} with amount {}.",
                amount.py_str()
            )));
        }
    }
    Err(ToolError::new("Too many certificates"))
}
