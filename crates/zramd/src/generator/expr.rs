//! zram-generator's size expressions (`zram-size`, `zram-resident-limit`): numbers in MiB,
//! the variable `ram` (the machine's memory in MiB), `+ - * /`, parentheses and the
//! functions `min(…)` and `max(…)` of one or more arguments.

/// Nesting deeper than this is refused (no stack exhaustion on hostile input).
const MAX_DEPTH: usize = 64;

/// Evaluates `text` with `ram` bound to `ram_mib`; an error says what is wrong in one line.
pub fn eval(text: &str, ram_mib: f64) -> Result<f64, String> {
    let mut p = Parser {
        text: text.as_bytes(),
        pos: 0,
        depth: 0,
        ram: ram_mib,
    };
    let value = p.sum()?;
    p.skip_space();
    if p.pos < p.text.len() {
        return Err(p.unexpected());
    }
    if !value.is_finite() {
        return Err(format!("{text:?} is not a finite number"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    depth: usize,
    ram: f64,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.text.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    /// The next non-space byte, not taken.
    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.text.get(self.pos).copied()
    }

    fn unexpected(&self) -> String {
        match self.text.get(self.pos) {
            Some(_) => {
                let rest = String::from_utf8_lossy(&self.text[self.pos..]);
                format!("unexpected {rest:?} at column {}", self.pos + 1)
            }
            None => "unexpected end of expression".to_owned(),
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("{} (wanted {:?})", self.unexpected(), byte as char))
        }
    }

    /// sum := product (('+' | '-') product)*
    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.pos += 1;
            let rhs = self.product()?;
            value = if op == b'+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    /// product := unary (('*' | '/') unary)*
    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            self.pos += 1;
            let rhs = self.unary()?;
            if op == b'*' {
                value *= rhs;
            } else if rhs == 0.0 {
                return Err("division by zero".to_owned());
            } else {
                value /= rhs;
            }
        }
        Ok(value)
    }

    /// unary := ('-' | '+') unary | atom
    fn unary(&mut self) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let value = match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                self.unary().map(|v| -v)
            }
            Some(b'+') => {
                self.pos += 1;
                self.unary()
            }
            _ => self.atom(),
        };
        self.depth -= 1;
        value
    }

    /// atom := number | 'ram' | ('min' | 'max') '(' sum (',' sum)* ')' | '(' sum ')'
    fn atom(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some(b'(') => {
                self.pos += 1;
                let value = self.sum()?;
                self.expect(b')')?;
                Ok(value)
            }
            Some(b'0'..=b'9' | b'.') => self.number(),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => self.name(),
            _ => Err(self.unexpected()),
        }
    }

    /// Takes the bytes from here on that `keep` accepts.
    fn take(&mut self, keep: impl Fn(u8) -> bool) -> String {
        let start = self.pos;
        while self.text.get(self.pos).is_some_and(|b| keep(*b)) {
            self.pos += 1;
        }
        String::from_utf8_lossy(&self.text[start..self.pos]).into_owned()
    }

    fn number(&mut self) -> Result<f64, String> {
        let digits = self.take(|b| b.is_ascii_digit() || b == b'.');
        match digits.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(value),
            Ok(_) => Err(format!("{digits:?} is too large")),
            Err(_) => Err(format!("{digits:?} is not a number")),
        }
    }

    fn name(&mut self) -> Result<f64, String> {
        let name = self.take(|b| b.is_ascii_alphanumeric() || b == b'_');
        let pick: fn(f64, f64) -> f64 = match name.as_str() {
            "ram" => return Ok(self.ram),
            "min" => f64::min,
            "max" => f64::max,
            _ => return Err(format!("unknown name {name:?} (ram, min, max)")),
        };
        // `min` and `max` pass over a NaN argument: an argument that overflowed must not
        // vanish in them.
        let finite = |v: f64| {
            if v.is_finite() {
                Ok(v)
            } else {
                Err(format!("an argument of {name}(…) is not a finite number"))
            }
        };
        self.expect(b'(')?;
        let mut value = finite(self.sum()?)?;
        while self.peek() == Some(b',') {
            self.pos += 1;
            value = pick(value, finite(self.sum()?)?);
        }
        self.expect(b')')?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::eval;

    #[test]
    fn arithmetic() {
        for (text, want) in [
            ("min(ram / 2, 4096)", 1000.0),
            ("max(ram / 2, 4096)", 4096.0),
            ("ram * 0.25", 500.0),
            ("2 + 3 * 4", 14.0),
            ("(2 + 3) * 4", 20.0),
            ("10 - 2 - 3", 5.0),
            ("64 / 4 / 2", 8.0),
            ("-(4) + +6", 2.0),
            ("min(3, 1, 2)", 1.0),
            ("  512  ", 512.0),
        ] {
            assert_eq!(eval(text, 2000.0), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_expressions() {
        for (text, why) in [
            ("ram / 0", "division by zero"),
            ("ram / (2 - 2)", "division by zero"),
            ("ram +", "unexpected end"),
            ("ram ram", "unexpected \"ram\" at column 5"),
            ("swap / 2", "unknown name \"swap\""),
            ("min(ram, 2", "wanted ')'"),
            ("1.2.3", "not a number"),
            ("", "unexpected end"),
            ("ram % 2", "unexpected \"% 2\""),
            ("4 $", "unexpected \"$\""),
            (&format!("1{}", "0".repeat(400)), "is too large"),
            (
                &format!("min(1{z} * 1{z} - 1{z} * 1{z}, 16)", z = "0".repeat(200)),
                "not a finite number",
            ),
        ] {
            let err = eval(text, 2000.0).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
        let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(eval(&deep, 1.0).unwrap_err().contains("nested deeper"));
    }
}
