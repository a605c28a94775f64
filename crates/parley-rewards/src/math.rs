//! Math answer equivalence: the final answer is pulled out of the reply (the last `\boxed{}`,
//! else what follows "answer is" or "Answer:", else the last number), then compared with the
//! row's expected answer as numbers, fractions, percentages, simple LaTeX, tuples, sets and
//! intervals, or as expressions in variables (evaluated at several points).
//!
//! Numbers are equal within a relative tolerance of 1e-6, which is about what `math-verify`
//! accepts after its rounding to six decimals; `bench/math-agreement` measures the agreement.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::choice::{boxed_inner, command_inner};
use crate::{Context, Score, ScoreError, Scorer};

/// Grades the reply's final answer against the row's expected answer.
#[derive(Debug, Clone)]
pub struct MathAnswer {
    pub field: String,
    /// Whether a reply without a `\boxed{}` answer scores 0 (as NeMo Gym's `math_with_judge` does).
    pub require_boxed: bool,
}

impl Default for MathAnswer {
    fn default() -> MathAnswer {
        MathAnswer { field: "expected_answer".into(), require_boxed: false }
    }
}

#[async_trait]
impl Scorer for MathAnswer {
    fn field(&self) -> Option<&str> {
        Some(&self.field)
    }

    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let expected = cx.required_text(&self.field, "math")?;
        let reply = cx.output_text();
        let answer = if self.require_boxed {
            boxed_inner(&reply).filter(|b| !b.trim().is_empty()).map(str::to_owned)
        } else {
            extract_answer(&reply)
        };
        let Some(answer) = answer else {
            return Ok(Score::new(0.0).with("extracted_answer", serde_json::Value::Null));
        };
        Ok(Score::hit(equivalent(&expected, &answer)).with("extracted_answer", answer))
    }
}

/// The final answer of a reply: the last `\boxed{}` or `\fbox{}`, else the text after the last
/// "answer is" or "Answer:" (to the end of its line or sentence), else the last number.
pub fn extract_answer(reply: &str) -> Option<String> {
    if let Some(inner) = boxed_inner(reply).or_else(|| command_inner(reply, "\\fbox{")) {
        return Some(inner.trim().to_owned());
    }
    let lower = reply.to_lowercase();
    // Lowercasing can change byte lengths outside ASCII; positions are only used when it did not.
    if lower.len() == reply.len() {
        let at =
            ["answer is", "answer:"].iter().filter_map(|marker| lower.rfind(marker).map(|i| i + marker.len())).max();
        if let Some(at) = at {
            let rest = reply[at..].trim_start_matches([' ', ':', '*']);
            let end = rest.find('\n').unwrap_or(rest.len());
            let line = rest[..end].trim();
            let line = line.strip_suffix('.').unwrap_or(line).trim();
            if !line.is_empty() {
                return Some(strip_delimiters(line).to_owned());
            }
        }
    }
    last_number(reply)
}

fn last_number(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut end = None;
    for i in (0..bytes.len()).rev() {
        if bytes[i].is_ascii_digit() {
            end = Some(i + 1);
            break;
        }
    }
    let end = end?;
    let mut start = end;
    while start > 0 && (bytes[start - 1].is_ascii_digit() || bytes[start - 1] == b'.' || bytes[start - 1] == b',') {
        start -= 1;
    }
    if start > 0 && bytes[start - 1] == b'-' {
        start -= 1;
    }
    let number = text[start..end].trim_start_matches([',', '.']);
    Some(number.replace(',', ""))
}

fn strip_delimiters(s: &str) -> &str {
    let s = s.trim();
    for (open, close) in [("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")] {
        if let Some(inner) = s.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
            return inner.trim();
        }
    }
    s
}

/// Grades a reply against the expected answer: its final answer extracted, then compared.
pub fn grade(expected: &str, reply: &str) -> bool {
    extract_answer(reply).is_some_and(|answer| equivalent(expected, &answer))
}

/// Whether two answers are the same mathematical object.
pub fn equivalent(expected: &str, given: &str) -> bool {
    let (e, g) = (normalize(expected), normalize(given));
    if e.is_empty() || g.is_empty() {
        return false;
    }
    if e == g {
        return true;
    }
    // Integers are compared exactly: they may be longer than a float holds.
    if let (Some(a), Some(b)) = (integer(&e), integer(&g)) {
        return a == b;
    }
    if has_word(&e) || has_word(&g) {
        return loose_text(&e) == loose_text(&g);
    }
    let (ev, gv) = (Answer::parse(&e), Answer::parse(&g));
    match (&ev, &gv) {
        (Some(ev), Some(gv)) => ev.equals(gv),
        _ => loose_text(&e) == loose_text(&g),
    }
}

/// An integer literal in canonical form (sign, no leading zeros, no thousands commas).
fn integer(s: &str) -> Option<String> {
    let s = s.trim();
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest.trim()),
        None => (false, s),
    };
    let digits: String = if is_thousands(digits) { digits.replace(',', "") } else { digits.to_owned() };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let trimmed = digits.trim_start_matches('0');
    let trimmed = if trimmed.is_empty() { "0" } else { trimmed };
    Some(if negative && trimmed != "0" { format!("-{trimmed}") } else { trimmed.to_owned() })
}

/// Whether the answer holds a word (three letters in a row, not a LaTeX command): such answers
/// are text ("Monday", "no solution"), not products of variables.
fn has_word(s: &str) -> bool {
    let mut run = 0;
    let mut command = false;
    for c in s.chars() {
        if c == '\\' {
            command = true;
            run = 0;
        } else if c.is_alphabetic() {
            run += 1;
            if run >= 3 && !command {
                return true;
            }
        } else {
            command = false;
            run = 0;
        }
    }
    false
}

/// Text compared as words: case, spaces and braces ignored.
fn loose_text(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace() && *c != '{' && *c != '}').flat_map(char::to_lowercase).collect()
}

/// LaTeX reduced to what the parser reads: delimiters, spacing, sizing and text wrappers gone.
fn normalize(s: &str) -> String {
    let mut s = strip_delimiters(s).to_owned();
    for (from, to) in [
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\displaystyle", ""),
        ("\\left", ""),
        ("\\right", ""),
        ("\\bigl", ""),
        ("\\bigr", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\:", ""),
        ("\\ ", " "),
        ("\\quad", " "),
        ("~", " "),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("°", ""),
        ("\\$", ""),
        ("\\%", "%"),
        ("\\le", "<="),
        ("\\ge", ">="),
        ("\\cdot", "*"),
        ("\\times", "*"),
        ("\\div", "/"),
        ("−", "-"),
        ("π", "\\pi"),
        ("∞", "\\infty"),
    ] {
        s = s.replace(from, to);
    }
    for wrapper in ["\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\mbox", "\\textit", "\\operatorname"] {
        s = unwrap_command(&s, wrapper);
    }
    let s = s.trim().trim_end_matches('.').trim();
    // `x = 5` and `y=2x+1` are their right-hand side, when the left is one name.
    if let Some((lhs, rhs)) = s.split_once('=')
        && !rhs.contains('=')
        && !lhs.contains(['<', '>'])
        && !rhs.starts_with(['<', '>'])
    {
        let lhs = lhs.trim();
        if !lhs.is_empty() && lhs.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '\\') && lhs.len() <= 8 {
            return rhs.trim().to_owned();
        }
    }
    s.to_owned()
}

/// `\text{abc}` → `abc`, for every occurrence of the command.
fn unwrap_command(s: &str, command: &str) -> String {
    let marker = format!("{command}{{");
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(&marker) {
        out.push_str(&rest[..at]);
        let body = &rest[at + marker.len()..];
        let mut depth = 1usize;
        let mut end = None;
        for (i, ch) in body.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        match end {
            Some(end) => {
                out.push_str(&body[..end]);
                rest = &body[end + 1..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// A parsed answer: one value, or several (a tuple, a set, an interval).
#[derive(Debug, Clone)]
enum Answer {
    One(Value),
    Tuple(Vec<Value>),
    Set(Vec<Value>),
    Interval { open_left: bool, open_right: bool, low: Value, high: Value },
}

/// One value: an expression and whether it was written as a percentage.
#[derive(Debug, Clone)]
struct Value {
    expr: Expr,
    percent: bool,
}

impl Answer {
    fn parse(s: &str) -> Option<Answer> {
        let s = s.trim();
        let items = split_top(s);
        if items.len() == 1 {
            if let Some(inner) = s.strip_prefix("\\{").and_then(|r| r.strip_suffix("\\}")) {
                return Some(Answer::Set(split_top(inner).iter().map(|i| Value::parse(i)).collect::<Option<_>>()?));
            }
            return Some(Answer::One(Value::parse(s)?));
        }
        let first = s.chars().next()?;
        let last = s.chars().last()?;
        let inner = || split_top(&s[first.len_utf8()..s.len() - last.len_utf8()]);
        if matches!(first, '(' | '[') && matches!(last, ')' | ']') && split_top(&s[1..s.len() - 1]).len() > 1 {
            let parts: Vec<Value> = inner().iter().map(|i| Value::parse(i)).collect::<Option<_>>()?;
            if parts.len() == 2 && (first == '[' || last == ']' || first != last) {
                let mut it = parts.into_iter();
                return Some(Answer::Interval {
                    open_left: first == '(',
                    open_right: last == ')',
                    low: it.next()?,
                    high: it.next()?,
                });
            }
            if parts.len() == 2 && first == '(' {
                // `(1, 2)` is an open interval or a pair: both read the same way.
                let mut it = parts.into_iter();
                return Some(Answer::Interval { open_left: true, open_right: true, low: it.next()?, high: it.next()? });
            }
            return Some(Answer::Tuple(parts));
        }
        if let Some(inner) = s.strip_prefix("\\{").and_then(|r| r.strip_suffix("\\}")) {
            return Some(Answer::Set(split_top(inner).iter().map(|i| Value::parse(i)).collect::<Option<_>>()?));
        }
        Some(Answer::Set(items.iter().map(|i| Value::parse(i)).collect::<Option<_>>()?))
    }

    fn equals(&self, other: &Answer) -> bool {
        match (self, other) {
            (Answer::One(a), Answer::One(b)) => a.equals(b),
            (Answer::Tuple(a), Answer::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.equals(y)),
            (Answer::Set(a), Answer::Set(b)) => {
                a.len() == b.len()
                    && a.iter().all(|x| b.iter().any(|y| x.equals(y)))
                    && b.iter().all(|y| a.iter().any(|x| x.equals(y)))
            }
            (
                Answer::Interval { open_left: l1, open_right: r1, low: a1, high: b1 },
                Answer::Interval { open_left: l2, open_right: r2, low: a2, high: b2 },
            ) => l1 == l2 && r1 == r2 && a1.equals(a2) && b1.equals(b2),
            // A pair written as a set or tuple the other way.
            (Answer::Interval { open_left: true, open_right: true, low, high }, Answer::Tuple(t))
            | (Answer::Tuple(t), Answer::Interval { open_left: true, open_right: true, low, high }) => {
                t.len() == 2 && low.equals(&t[0]) && high.equals(&t[1])
            }
            _ => false,
        }
    }
}

/// Splits at commas outside brackets; `1,000,000` (thousands) stays one item.
fn split_top(s: &str) -> Vec<String> {
    if is_thousands(s) {
        return vec![s.replace(',', "")];
    }
    let mut items = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '\\' if matches!(chars.peek(), Some('{') | Some('}')) => {
                current.push(c);
                let brace = chars.next().unwrap_or('{');
                depth += if brace == '{' { 1 } else { -1 };
                current.push(brace);
                continue;
            }
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current).trim().to_owned());
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current.trim().to_owned());
    items
}

fn is_thousands(s: &str) -> bool {
    let s = s.trim().trim_start_matches('-');
    let (int, _) = s.split_once('.').unwrap_or((s, ""));
    let groups: Vec<&str> = int.split(',').collect();
    groups.len() > 1
        && (1..=3).contains(&groups[0].len())
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_digit()))
        && groups[1..].iter().all(|g| g.len() == 3)
}

impl Value {
    fn parse(s: &str) -> Option<Value> {
        let s = s.trim();
        let (body, percent) = match s.strip_suffix('%') {
            Some(body) => (body.trim(), true),
            None => (s, false),
        };
        let body = if is_thousands(body) { body.replace(',', "") } else { body.to_owned() };
        let tokens = tokenize(&body)?;
        let mut parser = Parser { tokens: &tokens, at: 0 };
        let expr = parser.expr()?;
        (parser.at == tokens.len()).then_some(Value { expr, percent })
    }

    /// Equal as numbers (a percentage also equals its fraction), or as functions of their
    /// variables at several points.
    fn equals(&self, other: &Value) -> bool {
        let mut names = Vec::new();
        self.expr.vars(&mut names);
        other.expr.vars(&mut names);
        names.sort();
        names.dedup();
        if names.is_empty() {
            let (Some(a), Some(b)) = (self.expr.eval(&BTreeMap::new()), other.expr.eval(&BTreeMap::new())) else {
                return false;
            };
            return close(a, b)
                || (self.percent && !other.percent && close(a / 100.0, b))
                || (other.percent && !self.percent && close(a, b / 100.0));
        }
        if self.percent != other.percent {
            return false;
        }
        let points = [0.713, 1.37, 2.19, -0.61];
        let mut compared = 0;
        for (k, base) in points.iter().enumerate() {
            let env: BTreeMap<String, f64> =
                names.iter().enumerate().map(|(i, n)| (n.clone(), base + 0.31 * i as f64 + 0.07 * k as f64)).collect();
            match (self.expr.eval(&env), other.expr.eval(&env)) {
                (Some(a), Some(b)) if a.is_finite() && b.is_finite() => {
                    if !close(a, b) {
                        return false;
                    }
                    compared += 1;
                }
                (None, None) => {}
                _ => return false,
            }
        }
        compared > 0
    }
}

/// Equal after rounding to six decimals (as math-verify rounds), or within a relative 1e-9 for
/// numbers too large for the rounding to matter.
fn close(a: f64, b: f64) -> bool {
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    let round = |x: f64| (x * 1e6).round() / 1e6;
    round(a) == round(b) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(f64),
    Name(String),
    Command(String),
    Op(char),
    Open(char),
    Close(char),
}

fn tokenize(s: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = s.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    // After `\frac` or `\sqrt` an unbraced argument is one digit (`\frac12` is a half).
    let mut single_digits = 0u8;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() && single_digits > 0 {
            single_digits -= 1;
            tokens.push(Token::Num(f64::from(c.to_digit(10)?)));
            i += 1;
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            single_digits = 0;
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(Token::Num(text.parse().ok()?));
        } else if c.is_alphabetic() {
            tokens.push(Token::Name(c.to_string()));
            i += 1;
        } else if c == '\\' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i].is_ascii_alphabetic() {
                i += 1;
            }
            if i == start {
                // `\{` and `\}` are braces here.
                let next = *chars.get(i)?;
                tokens.push(match next {
                    '{' => Token::Open('{'),
                    '}' => Token::Close('}'),
                    _ => return None,
                });
                i += 1;
            } else {
                let command: String = chars[start..i].iter().collect();
                single_digits = match command.as_str() {
                    "frac" | "cfrac" => 2,
                    "sqrt" => 1,
                    _ => 0,
                };
                tokens.push(Token::Command(command));
                continue;
            }
        } else if "+-*/^_!".contains(c) {
            single_digits = 0;
            tokens.push(Token::Op(c));
            i += 1;
        } else if "([{".contains(c) {
            single_digits = 0;
            tokens.push(Token::Open(c));
            i += 1;
        } else if ")]}".contains(c) {
            tokens.push(Token::Close(c));
            i += 1;
        } else {
            return None;
        }
    }
    Some(tokens)
}

#[derive(Debug, Clone)]
enum Expr {
    Num(f64),
    Var(String),
    Neg(Box<Expr>),
    Bin(char, Box<Expr>, Box<Expr>),
    Call(String, Box<Expr>),
    Fact(Box<Expr>),
}

impl Expr {
    fn vars(&self, out: &mut Vec<String>) {
        match self {
            Expr::Num(_) => {}
            Expr::Var(name) => out.push(name.clone()),
            Expr::Neg(e) | Expr::Call(_, e) | Expr::Fact(e) => e.vars(out),
            Expr::Bin(_, a, b) => {
                a.vars(out);
                b.vars(out);
            }
        }
    }

    fn eval(&self, env: &BTreeMap<String, f64>) -> Option<f64> {
        let v = match self {
            Expr::Num(n) => *n,
            Expr::Var(name) => *env.get(name)?,
            Expr::Neg(e) => -e.eval(env)?,
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.eval(env)?, b.eval(env)?);
                match op {
                    '+' => a + b,
                    '-' => a - b,
                    '*' => a * b,
                    '/' => a / b,
                    '^' => a.powf(b),
                    'r' => b.powf(1.0 / a),
                    _ => return None,
                }
            }
            Expr::Fact(e) => {
                let n = e.eval(env)?;
                if n < 0.0 || n.fract() != 0.0 || n > 170.0 {
                    return None;
                }
                (1..=n as u32).map(f64::from).product()
            }
            Expr::Call(f, e) => {
                let x = e.eval(env)?;
                match f.as_str() {
                    "sqrt" => x.sqrt(),
                    "sin" => x.sin(),
                    "cos" => x.cos(),
                    "tan" => x.tan(),
                    "ln" => x.ln(),
                    "log" => x.log10(),
                    "exp" => x.exp(),
                    _ => return None,
                }
            }
        };
        // A result too large for a float is unknown rather than infinite; only the literal
        // `\\infty` is infinite, so two different overflowing answers are never equal.
        let literal_infinity = matches!(self, Expr::Num(_) | Expr::Neg(_));
        (!v.is_nan() && (v.is_finite() || literal_infinity)).then_some(v)
    }
}

struct Parser<'t> {
    tokens: &'t [Token],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn expr(&mut self) -> Option<Expr> {
        let mut left = self.term()?;
        while let Some(Token::Op(op @ ('+' | '-'))) = self.peek().cloned() {
            self.at += 1;
            let right = self.term()?;
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
        Some(left)
    }

    fn term(&mut self) -> Option<Expr> {
        let mut left = self.unary()?;
        loop {
            match self.peek() {
                Some(Token::Op(op @ ('*' | '/'))) => {
                    let op = *op;
                    self.at += 1;
                    let right = self.unary()?;
                    left = Expr::Bin(op, Box::new(left), Box::new(right));
                }
                // Implicit multiplication: `2x`, `3\pi`, `2(x+1)`, `x\sqrt{2}`.
                Some(Token::Num(_) | Token::Name(_) | Token::Open('(' | '{') | Token::Command(_)) => {
                    let right = self.power()?;
                    left = Expr::Bin('*', Box::new(left), Box::new(right));
                }
                _ => return Some(left),
            }
        }
    }

    fn unary(&mut self) -> Option<Expr> {
        match self.peek() {
            Some(Token::Op('-')) => {
                self.at += 1;
                Some(Expr::Neg(Box::new(self.unary()?)))
            }
            Some(Token::Op('+')) => {
                self.at += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Option<Expr> {
        let mut base = self.atom()?;
        loop {
            match self.peek() {
                Some(Token::Op('!')) => {
                    self.at += 1;
                    base = Expr::Fact(Box::new(base));
                }
                Some(Token::Op('^')) => {
                    self.at += 1;
                    let exponent = match self.peek() {
                        Some(Token::Op('-')) => {
                            self.at += 1;
                            Expr::Neg(Box::new(self.atom()?))
                        }
                        _ => self.atom()?,
                    };
                    base = Expr::Bin('^', Box::new(base), Box::new(exponent));
                }
                _ => return Some(base),
            }
        }
    }

    /// A braced group `{...}`, or a single token as LaTeX allows (`\frac12`).
    fn group(&mut self) -> Option<Expr> {
        match self.peek()? {
            Token::Open('{') => {
                self.at += 1;
                let e = self.expr()?;
                matches!(self.next()?, Token::Close('}')).then_some(e)
            }
            _ => self.atom(),
        }
    }

    fn atom(&mut self) -> Option<Expr> {
        match self.next()? {
            Token::Num(n) => Some(Expr::Num(n)),
            Token::Name(name) => {
                let mut name = name;
                if let Some(Token::Op('_')) = self.peek() {
                    self.at += 1;
                    match self.next()? {
                        Token::Num(n) => name.push_str(&n.to_string()),
                        Token::Name(s) => name.push_str(&s),
                        Token::Open('{') => {
                            while let Some(t) = self.next() {
                                match t {
                                    Token::Close('}') => break,
                                    Token::Num(n) => name.push_str(&n.to_string()),
                                    Token::Name(s) => name.push_str(&s),
                                    _ => return None,
                                }
                            }
                        }
                        _ => return None,
                    }
                }
                if name == "i" {
                    // The imaginary unit has no real value; such answers are compared as text.
                    return None;
                }
                Some(Expr::Var(name))
            }
            Token::Open(open) => {
                let e = self.expr()?;
                let close = self.next()?;
                let fits = matches!(
                    (open, &close),
                    ('(', Token::Close(')')) | ('[', Token::Close(']')) | ('{', Token::Close('}'))
                );
                fits.then_some(e)
            }
            Token::Command(command) => match command.as_str() {
                "frac" | "cfrac" => {
                    let num = self.group()?;
                    let den = self.group()?;
                    Some(Expr::Bin('/', Box::new(num), Box::new(den)))
                }
                "sqrt" => {
                    if let Some(Token::Open('[')) = self.peek() {
                        self.at += 1;
                        let index = self.expr()?;
                        if !matches!(self.next()?, Token::Close(']')) {
                            return None;
                        }
                        let radicand = self.group()?;
                        return Some(Expr::Bin('r', Box::new(index), Box::new(radicand)));
                    }
                    Some(Expr::Call("sqrt".into(), Box::new(self.group()?)))
                }
                "pi" => Some(Expr::Num(std::f64::consts::PI)),
                "infty" | "inf" => Some(Expr::Num(f64::INFINITY)),
                "sin" | "cos" | "tan" | "ln" | "log" | "exp" => {
                    let arg = self.power()?;
                    Some(Expr::Call(command, Box::new(arg)))
                }
                "alpha" | "beta" | "gamma" | "theta" | "lambda" | "mu" | "sigma" | "phi" | "omega" => {
                    Some(Expr::Var(command))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extraction() {
        assert_eq!(extract_answer(r"so \boxed{\frac{1}{2}} and finally \boxed{3}").as_deref(), Some("3"));
        assert_eq!(extract_answer("Thus the answer is $42$.").as_deref(), Some("42"));
        assert_eq!(extract_answer("Answer: 7/8\nthanks").as_deref(), Some("7/8"));
        assert_eq!(extract_answer("we get 3 apples, then 1,250 pears").as_deref(), Some("1250"));
        assert_eq!(extract_answer("x is -4.5").as_deref(), Some("-4.5"));
        assert_eq!(extract_answer("no idea"), None);
    }

    #[test]
    fn numbers_fractions_percentages() {
        for (a, b) in [
            ("0.5", r"\frac{1}{2}"),
            (r"\frac12", "1/2"),
            (r"\dfrac{3}{4}", "0.75"),
            ("50\\%", "0.5"),
            ("50\\%", "50"),
            ("1,000", "1000"),
            ("x = 5", "5"),
            (r"2\sqrt{3}", r"\sqrt{12}"),
            (r"\sqrt[3]{8}", "2"),
            (r"\pi/2", r"\frac{\pi}{2}"),
            ("90^\\circ", "90"),
            (r"\text{5 }", "5"),
            ("5!", "120"),
        ] {
            assert!(equivalent(a, b), "{a} vs {b}");
        }
        for (a, b) in [("0.5", "0.6"), ("1/3", "0.33"), ("50\\%", "5"), ("2", "-2"), ("", "0")] {
            assert!(!equivalent(a, b), "{a} vs {b}");
        }
    }

    #[test]
    fn symbolic_tuples_sets_intervals() {
        assert!(equivalent("x^2+2x+1", "(x+1)^2"));
        assert!(equivalent("2x+1", "1+2x"));
        assert!(!equivalent("2x+1", "2x-1"));
        assert!(equivalent("(1, 2)", "(1,2)"));
        assert!(!equivalent("(1, 2)", "(2, 1)"));
        assert!(equivalent(r"\{1, 2\}", r"\{2, 1\}"));
        assert!(equivalent("[0, \\infty)", "[0,\\infty)"));
        assert!(!equivalent("[0, 1)", "(0, 1)"));
        assert!(equivalent("3, 5", "5, 3"));
        assert!(equivalent("Monday", "\\text{monday}"));
    }

    #[test]
    fn anything_at_all_never_panics() {
        for s in ["\\", "\\frac", "((", "}{", "^", "1/0", "\\sqrt[", "x_", "%", "\\{", "é", "1,,2", "\\boxed{"] {
            let _ = equivalent(s, s);
            let _ = equivalent(s, "1");
            let _ = extract_answer(s);
        }
    }
}
