//! The `calculate` tool: tau2 checks the characters, `eval`s the expression as Python and
//! returns `str(round(float(result), 2))`. This is a Python-arithmetic evaluator for exactly
//! that alphabet (digits, `.`, `+ - * /`, parentheses, spaces): `/` is true division, `//`
//! floors, `**` binds tighter than a unary minus on its left, and ints stay ints until a
//! float or `/` enters. It never evaluates anything outside that alphabet.

use crate::pyjson::{float_repr, round2};
use crate::toolkit::ToolError;

#[derive(Debug, Clone, Copy, PartialEq)]
enum V {
    Int(i128),
    Float(f64),
}

impl V {
    fn f(self) -> f64 {
        match self {
            V::Int(i) => i as f64,
            V::Float(f) => f,
        }
    }
}

const SYNTAX: &str = "invalid syntax (<string>, line 1)";

/// What the `calculate` tool returns for `expression`.
pub fn calculate(expression: &str) -> Result<String, ToolError> {
    if !expression.chars().all(|c| "0123456789+-*/(). ".contains(c)) {
        return Err(ToolError::new("Invalid characters in expression"));
    }
    let tokens = tokenize(expression)?;
    let mut parser = Parser { tokens, pos: 0 };
    let value = parser.expr()?;
    if parser.pos != parser.tokens.len() {
        return Err(ToolError::new(SYNTAX));
    }
    Ok(float_repr(round2(value.f())))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(V),
    Plus,
    Minus,
    Star,
    Pow,
    Slash,
    FloorDiv,
    LParen,
    RParen,
}

fn tokenize(s: &str) -> Result<Vec<Tok>, ToolError> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' => i += 1,
            '+' => {
                out.push(Tok::Plus);
                i += 1
            }
            '-' => {
                out.push(Tok::Minus);
                i += 1
            }
            '(' => {
                out.push(Tok::LParen);
                i += 1
            }
            ')' => {
                out.push(Tok::RParen);
                i += 1
            }
            '*' if chars.get(i + 1) == Some(&'*') => {
                out.push(Tok::Pow);
                i += 2
            }
            '*' => {
                out.push(Tok::Star);
                i += 1
            }
            '/' if chars.get(i + 1) == Some(&'/') => {
                out.push(Tok::FloorDiv);
                i += 2
            }
            '/' => {
                out.push(Tok::Slash);
                i += 1
            }
            _ => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                out.push(Tok::Num(number(&text)?));
            }
        }
    }
    Ok(out)
}

fn number(text: &str) -> Result<V, ToolError> {
    if text == "." || text.matches('.').count() > 1 {
        return Err(ToolError::new(SYNTAX));
    }
    if text.contains('.') {
        return text.parse::<f64>().map(V::Float).map_err(|_| ToolError::new(SYNTAX));
    }
    if text.len() > 1 && text.starts_with('0') && text.chars().any(|c| c != '0') {
        return Err(ToolError::new(
            "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)",
        ));
    }
    match text.parse::<i128>() {
        Ok(i) => Ok(V::Int(i)),
        Err(_) => text.parse::<f64>().map(V::Float).map_err(|_| ToolError::new(SYNTAX)),
    }
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn expr(&mut self) -> Result<V, ToolError> {
        let mut left = self.term()?;
        while let Some(op) = self.peek().cloned() {
            match op {
                Tok::Plus | Tok::Minus => {
                    self.pos += 1;
                    let right = self.term()?;
                    left = arith(left, right, &op)?;
                }
                _ => break,
            }
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<V, ToolError> {
        let mut left = self.unary()?;
        while let Some(op) = self.peek().cloned() {
            match op {
                Tok::Star | Tok::Slash | Tok::FloorDiv => {
                    self.pos += 1;
                    let right = self.unary()?;
                    left = arith(left, right, &op)?;
                }
                _ => break,
            }
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<V, ToolError> {
        match self.peek() {
            Some(Tok::Minus) => {
                self.pos += 1;
                Ok(match self.unary()? {
                    V::Int(i) => V::Int(-i),
                    V::Float(f) => V::Float(-f),
                })
            }
            Some(Tok::Plus) => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Result<V, ToolError> {
        let base = self.atom()?;
        if self.peek() == Some(&Tok::Pow) {
            self.pos += 1;
            let exp = self.unary()?;
            return pow(base, exp);
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<V, ToolError> {
        match self.tokens.get(self.pos).cloned() {
            Some(Tok::Num(v)) => {
                self.pos += 1;
                Ok(v)
            }
            Some(Tok::LParen) => {
                self.pos += 1;
                let v = self.expr()?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(ToolError::new(SYNTAX));
                }
                self.pos += 1;
                Ok(v)
            }
            _ => Err(ToolError::new(SYNTAX)),
        }
    }
}

fn arith(a: V, b: V, op: &Tok) -> Result<V, ToolError> {
    Ok(match (a, b, op) {
        (V::Int(x), V::Int(y), Tok::Plus) => x.checked_add(y).map(V::Int).unwrap_or(V::Float(x as f64 + y as f64)),
        (V::Int(x), V::Int(y), Tok::Minus) => x.checked_sub(y).map(V::Int).unwrap_or(V::Float(x as f64 - y as f64)),
        (V::Int(x), V::Int(y), Tok::Star) => x.checked_mul(y).map(V::Int).unwrap_or(V::Float(x as f64 * y as f64)),
        (V::Int(_), V::Int(0), Tok::Slash) => return Err(ToolError::new("division by zero")),
        (V::Int(_), V::Int(0), Tok::FloorDiv) => return Err(ToolError::new("integer division or modulo by zero")),
        (V::Int(x), V::Int(y), Tok::FloorDiv) => V::Int(x / y - i128::from(x % y != 0 && ((x < 0) != (y < 0)))),
        (_, b, Tok::Slash) if b.f() == 0.0 => return Err(ToolError::new("float division by zero")),
        (_, b, Tok::FloorDiv) if b.f() == 0.0 => return Err(ToolError::new("float floor division by zero")),
        (a, b, Tok::Plus) => V::Float(a.f() + b.f()),
        (a, b, Tok::Minus) => V::Float(a.f() - b.f()),
        (a, b, Tok::Star) => V::Float(a.f() * b.f()),
        (a, b, Tok::Slash) => V::Float(a.f() / b.f()),
        (a, b, Tok::FloorDiv) => V::Float((a.f() / b.f()).floor()),
        _ => return Err(ToolError::new(SYNTAX)),
    })
}

fn pow(base: V, exp: V) -> Result<V, ToolError> {
    match (base, exp) {
        (V::Int(b), V::Int(e)) if e >= 0 => Ok(u32::try_from(e)
            .ok()
            .and_then(|e| b.checked_pow(e))
            .map(V::Int)
            .unwrap_or(V::Float((b as f64).powf(e as f64)))),
        (b, _) if b.f() == 0.0 && exp.f() < 0.0 => Err(ToolError::new("0.0 cannot be raised to a negative power")),
        (b, e) => Ok(V::Float(b.f().powf(e.f()))),
    }
}

#[cfg(test)]
mod tests {
    use super::calculate;

    #[test]
    fn results_are_pythons() {
        assert_eq!(calculate("2 + 2").unwrap(), "4.0");
        assert_eq!(calculate("10 / 4").unwrap(), "2.5");
        assert_eq!(calculate("100 / 3").unwrap(), "33.33");
        assert_eq!(calculate("-2 ** 2").unwrap(), "-4.0");
        assert_eq!(calculate("2 ** -1").unwrap(), "0.5");
        assert_eq!(calculate("7 // 2").unwrap(), "3.0");
        assert_eq!(calculate("-7 // 2").unwrap(), "-4.0");
        assert_eq!(calculate("(1.1 + 2.2) * 3").unwrap(), "9.9");
        assert_eq!(calculate("1234.56 - 200.5 * 2").unwrap(), "833.56");
    }

    #[test]
    fn errors_are_pythons() {
        assert_eq!(calculate("2 + x").unwrap_err().0, "Invalid characters in expression");
        assert_eq!(calculate("1 / 0").unwrap_err().0, "division by zero");
        assert_eq!(calculate("1.0 / 0").unwrap_err().0, "float division by zero");
        assert_eq!(calculate("2 +").unwrap_err().0, "invalid syntax (<string>, line 1)");
    }
}
