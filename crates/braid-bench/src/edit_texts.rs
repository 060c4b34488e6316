//! Texts for the edit workload of `braid bench speculative`: each is asked back with one
//! change, the kind of request (rewrite a paragraph, rename in a function, change a field)
//! whose answer mostly repeats what the prompt holds. Written for this benchmark.
//!
//! Each request is a conversation whose earlier turn already did one such edit
//! ([`EXAMPLE`]): a 135M-parameter model asked cold often paraphrases instead, and the
//! workload is about answers that copy, not about whether a small model follows instructions.

use serde_json::{json, Value};

/// A text, and the one change the request asks for: replace `from` by `to`.
pub struct EditText {
    pub text: &'static str,
    pub from: &'static str,
    pub to: &'static str,
}

impl EditText {
    /// The user's message asking for the change.
    fn request(&self) -> String {
        format!(
            "Repeat the following text exactly, but replace \"{}\" with \"{}\":\n\n{}",
            self.from, self.to, self.text
        )
    }

    /// The answer asked for.
    pub fn edited(&self) -> String {
        self.text.replacen(self.from, self.to, 1)
    }

    /// The chat messages of the request: the example's turn, then this text's.
    pub fn messages(&self) -> Value {
        json!([
            {"role": "user", "content": EXAMPLE.request()},
            {"role": "assistant", "content": EXAMPLE.edited()},
            {"role": "user", "content": self.request()},
        ])
    }
}

/// The earlier turn of every edit conversation.
pub const EXAMPLE: EditText = EditText {
    text: "The lighthouse keeper climbed the stairs every evening at six. He wound the clock that \
turned the lamp, cleaned the glass with a soft cloth and wrote the weather in a thick book: the \
wind, the height of the waves and the ships that passed before dark.",
    from: "six",
    to: "seven",
};

pub const EDIT_TEXTS: &[EditText] = &[
    EditText {
        text: "The river town of Alder Ford was built where three roads met a shallow crossing. \
Farmers brought grain there every autumn, and merchants from the coast came to trade salt, \
cloth and iron tools. Over the years the market grew into a fair that lasted two weeks, and \
the town built a stone bridge so that carts no longer had to wait for the water to fall.",
        from: "autumn",
        to: "spring",
    },
    EditText {
        text: "def moving_average(values, window):\n    \
if window <= 0:\n        raise ValueError(\"window must be positive\")\n    \
averages = []\n    total = 0.0\n    for i, value in enumerate(values):\n        \
total += value\n        if i >= window:\n            total -= values[i - window]\n        \
if i >= window - 1:\n            averages.append(total / window)\n    return averages\n",
        from: "moving_average",
        to: "rolling_mean",
    },
    EditText {
        text: "Our support team answers every message within one business day. If your order \
arrived damaged, reply to your confirmation email with a photo of the package and the item, \
and we will send a replacement at no cost. Returns are accepted for thirty days after \
delivery, as long as the item is unused and in its original box.",
        from: "thirty days",
        to: "sixty days",
    },
    EditText {
        text: "{\n  \"name\": \"weather-station\",\n  \"version\": \"1.4.2\",\n  \"sensors\": \
[\"temperature\", \"humidity\", \"pressure\"],\n  \"interval_seconds\": 60,\n  \"upload\": {\n    \
\"url\": \"https://example.org/readings\",\n    \"retries\": 3\n  }\n}\n",
        from: "\"interval_seconds\": 60",
        to: "\"interval_seconds\": 30",
    },
    EditText {
        text: "Preheat the oven to 200 degrees. Mix the flour, the baking powder and a pinch of \
salt in a large bowl, then rub in the cold butter until the mixture looks like fine \
breadcrumbs. Stir in the milk with a knife to make a soft dough, turn it out onto a floured \
board and pat it to a thickness of two centimetres before cutting out the scones.",
        from: "200 degrees",
        to: "220 degrees",
    },
    EditText {
        text: "fn parse_port(text: &str) -> Result<u16, String> {\n    \
let port: u32 = text\n        .trim()\n        .parse()\n        \
.map_err(|e| format!(\"not a number: {e}\"))?;\n    if port == 0 || port > 65535 {\n        \
return Err(format!(\"{port} is not a port\"));\n    }\n    Ok(port as u16)\n}\n",
        from: "parse_port",
        to: "read_port",
    },
    EditText {
        text: "The committee met on Tuesday to review the budget for the new library. The \
architect presented two designs: a single large reading room with tall windows, and a \
building of three floors with smaller rooms for study groups. After a long discussion the \
committee chose the second design and asked for a revised estimate by the end of the month.",
        from: "Tuesday",
        to: "Thursday",
    },
    EditText {
        text: "SELECT customers.name, COUNT(orders.id) AS order_count\nFROM customers\n\
JOIN orders ON orders.customer_id = customers.id\nWHERE orders.created_at >= '2024-01-01'\n\
GROUP BY customers.name\nHAVING COUNT(orders.id) > 5\nORDER BY order_count DESC;\n",
        from: "> 5",
        to: "> 10",
    },
];
