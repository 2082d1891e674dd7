//! A small f64 complex arithmetic: the host reference for the complex64 functions (f64 has 29
//! bits to spare, so plain formulas are accurate enough away from exact cancellation, which the
//! sampled inputs avoid by staying off the axes and away from the unit circle).

use std::ops::{Add, Div, Mul, Neg, Sub};

/// A complex number in f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct C(pub f64, pub f64);

impl Add for C {
    type Output = C;
    fn add(self, o: C) -> C {
        C(self.0 + o.0, self.1 + o.1)
    }
}
impl Sub for C {
    type Output = C;
    fn sub(self, o: C) -> C {
        C(self.0 - o.0, self.1 - o.1)
    }
}
impl Mul for C {
    type Output = C;
    fn mul(self, o: C) -> C {
        C(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
}
impl Div for C {
    type Output = C;
    fn div(self, o: C) -> C {
        let d = o.0 * o.0 + o.1 * o.1;
        C(
            (self.0 * o.0 + self.1 * o.1) / d,
            (self.1 * o.0 - self.0 * o.1) / d,
        )
    }
}
impl Neg for C {
    type Output = C;
    fn neg(self) -> C {
        C(-self.0, -self.1)
    }
}

const I: C = C(0.0, 1.0);
const ONE: C = C(1.0, 0.0);

impl C {
    pub fn abs(self) -> f64 {
        self.0.hypot(self.1)
    }
    pub fn exp(self) -> C {
        let e = self.0.exp();
        C(e * self.1.cos(), e * self.1.sin())
    }
    pub fn ln(self) -> C {
        C(self.abs().ln(), self.1.atan2(self.0))
    }
    pub fn sqrt(self) -> C {
        let r = self.abs();
        let t = ((r + self.0.abs()) * 0.5).sqrt();
        if self.0 >= 0.0 {
            C(t, self.1 / (2.0 * t))
        } else {
            C(self.1.abs() / (2.0 * t), t.copysign(self.1))
        }
    }
    fn scale(self, s: f64) -> C {
        C(self.0 * s, self.1 * s)
    }
}

/// The reference for `wh_c<name>_f32`, or `None` for a name it does not know.
pub fn reference(name: &str, a: C, b: C) -> Option<C> {
    let small = a.abs() < 1e-4;
    Some(match name {
        "exp" => a.exp(),
        "expm1" => {
            if small {
                a + (a * a).scale(0.5) + (a * a * a).scale(1.0 / 6.0)
            } else {
                a.exp() - ONE
            }
        }
        "log" => a.ln(),
        "log1p" => {
            if small {
                a - (a * a).scale(0.5) + (a * a * a).scale(1.0 / 3.0)
            } else {
                (ONE + a).ln()
            }
        }
        "sqrt" => a.sqrt(),
        "rsqrt" => ONE / a.sqrt(),
        "sin" => C(a.0.sin() * a.1.cosh(), a.0.cos() * a.1.sinh()),
        "cos" => C(a.0.cos() * a.1.cosh(), -a.0.sin() * a.1.sinh()),
        "tan" => {
            let s = C(a.0.sin() * a.1.cosh(), a.0.cos() * a.1.sinh());
            let c = C(a.0.cos() * a.1.cosh(), -a.0.sin() * a.1.sinh());
            s / c
        }
        "sinh" => C(a.0.sinh() * a.1.cos(), a.0.cosh() * a.1.sin()),
        "cosh" => C(a.0.cosh() * a.1.cos(), a.0.sinh() * a.1.sin()),
        "tanh" => {
            let s = C(a.0.sinh() * a.1.cos(), a.0.cosh() * a.1.sin());
            let c = C(a.0.cosh() * a.1.cos(), a.0.sinh() * a.1.sin());
            s / c
        }
        "asin" => -(I * (I * a + (ONE - a * a).sqrt()).ln()),
        "acos" => C(std::f64::consts::FRAC_PI_2, 0.0) + I * (I * a + (ONE - a * a).sqrt()).ln(),
        "atan" => (I.scale(0.5)) * ((I + a) / (I - a)).ln(),
        "asinh" => (a + (a * a + ONE).sqrt()).ln(),
        "acosh" => (a + (a + ONE).sqrt() * (a - ONE).sqrt()).ln(),
        "atanh" => ((ONE + a) / (ONE - a)).ln().scale(0.5),
        "pow" => (b * a.ln()).exp(),
        "div" => a / b,
        "sign" => a.scale(1.0 / a.abs()),
        "logistic" => ONE / (ONE + (-a).exp()),
        _ => return None,
    })
}
