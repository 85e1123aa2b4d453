package redact

import "fmt"

// placeholders are values of a key=value pair that name no secret: an
// unset or masked value, a variable reference, a template, a file path, a
// marker a previous pass wrote.
var placeholders = Allow{Regexes: []string{
	`(?i)^(?:null|none|nil|true|false|yes|no|on|off|required|optional|unset|empty|redacted|hidden|masked|n/a|undefined|new|this|self|\*+|x{3,}|\.{3,}|-+|[01])$`,
	// A shell or template reference, a command substitution, a
	// placeholder in brackets: $X, ${X}, $(cmd), `cmd`, {Name}, [PASSWORD].
	"^[$`{\\[]",
	`^<`,
	`^/[A-Za-z0-9_./-]*$`,
	`^\[REDACTED:`,
	// A value masked or filled in by hand: runs of x, #, *, or of one
	// letter or digit (fo1_xxxx…, AIzaaaaa…, glc_1111…), "PUT_YOUR_TOKEN_HERE".
	`(?i)x{6,}|#{4,}|\*{4,}|a{8,}|1{8,}|0{8,}|your_?(?:token|key|secret|password)|_here\b`,
	// A name in capitals (access_token=ACCESS_TOKEN).
	`^[A-Z]+(?:_[A-Z]+)+$`,
}}

// notKeys are keys that end in a secret's word but name no secret: an
// object's or a table's key, a public key, Maven's io.jsonwebtoken
// coordinates.
var notKeys = Allow{Target: "match", Regexes: []string{
	`(?i)(?:bucket|object|primary|foreign|sort|partition|cache|routing|idempotency|hash|range|lookup|s3|public)_?(?:key|token)\\?["']?[ \t]*(?:=|:=|=>|:)`,
	`(?i)io\.jsonwebtoken`,
}}

// identifiers are values high_entropy_value takes for keys although they
// are names: UUIDs (credentialsId, kms_key_id), dotted names (host names,
// Foo.Bar code references) and alphabets.
var identifiers = Allow{Regexes: []string{
	`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`,
	`^[A-Za-z0-9_-]+(?:\.[A-Za-z][A-Za-z0-9_-]*)+$`,
	`(?i)abcdefgh|0123456789`,
	// Names of short words joined by '_' or '-' (struct_X509_pubkey_st,
	// id-Gost28147-89-None-KeyMeshing).
	`^[A-Za-z0-9]{1,10}(?:[_-][A-Za-z0-9]{1,10}){2,}$`,
}}

// ownRules are what gitleaks' defaults lack for output of production
// machines: secrets known by the key they are assigned to rather than by
// their shape, headers, URL userinfo, command-line flags, and key ids and
// PEM blocks where gitleaks' patterns need a word boundary or an END line
// that a cut or a neighbouring word takes away. Each replaces only the
// secret (its group), so the key stays readable.
func ownRules() []Rule {
	return []Rule{
		// A cut output may hold a BEGIN without its END: everything after
		// the BEGIN is redacted then.
		{Name: "private_key_block", Pattern: `-----BEGIN[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)`,
			Keywords: []string{"private key"},
			// A block with nothing in it ("anything", "...") documents the
			// format.
			Allow: []Allow{{Regexes: []string{`^-----BEGIN[ A-Z0-9_-]*-----\s*\S{0,20}\s*-----END`}}}},
		// Key ids glued to a word (KEY_AKIA…, Credential%3DAKIA…), where
		// gitleaks' \b does not match.
		{Name: "aws_access_key_id", Pattern: `((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})(?:[^A-Za-z0-9\n]|$)`,
			Keywords: []string{"a3t", "akia", "asia", "abia", "acca"},
			// A filled-in AKIAXXXX…. AWS's documentation key, which
			// gitleaks allows, stays redacted: harmless, and the
			// canonical leak of this project's tests.
			Allow: []Allow{{Regexes: []string{`X{8,}`}}}},
		// userinfo of any URL; the scheme, user and host stay.
		// The password may hold '/' (unescaped in real URLs); what follows
		// the ':' is a port and a path instead when it is digits up to the
		// first '/'.
		{Name: "url_password", Pattern: `[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:([^\s@/]*[^\s@/0-9][^\s@]*|[0-9]+)@`,
			Keywords: []string{"://"}},
		// Sentry DSNs: the key (and, in old DSNs, key:secret) is the userinfo.
		{Name: "sentry_dsn_key", Pattern: `[A-Za-z][A-Za-z0-9+.-]*://([0-9a-f]{32}(?::[0-9a-f]{32})?)@`,
			Keywords: []string{"://"}},
		{Name: "authorization", Pattern: `(?i)(?:proxy-)?authorization["']?[ \t]*[=:][ \t]*["']?(?:bearer|basic|token|digest|negotiate|apikey|sso-key|ssws)[ \t]+([A-Za-z0-9._~+/=:-]+)`,
			Keywords: []string{"authorization"}, Allow: []Allow{placeholders}},
		{Name: "secret_header", Pattern: `(?i)(?:set-cookie|cookie|x-api-key|x-auth-token|x-vault-token|x-amz-security-token|x-access-token|private-token|api-key)["']?[ \t]*:[ \t]*["']?([^\s"'][^\r\n"']*)`,
			Keywords: []string{"cookie", "x-api-key", "x-auth-token", "x-vault-token", "x-amz-security-token", "x-access-token", "private-token", "api-key"},
			Allow:    []Allow{placeholders}},
		// KEY=value, key: value, "Key": "value" (also JSON-escaped) where
		// the key, with any prefix and in any case, ends in a word that
		// names a secret: DB_PASSWORD, PGPASSWORD, MYSQL_PWD, client_secret.
		{Name: "secret_assignment", Pattern: `(?i)(?:^|[^A-Za-z0-9_.:/-])[A-Za-z0-9_.-]*(?:password|passwd|[_.-]pwd|passphrase|secret|credentials?|[_.-]pass|[_.-]auth|[_.-]dsn)` + assignValue(1),
			Keywords: []string{"password", "passwd", "_pwd", ".pwd", "-pwd", "passphrase", "secret", "credential",
				"_pass", ".pass", "-pass", "_auth", ".auth", "-auth", "_dsn", ".dsn", "-dsn"},
			Allow: []Allow{placeholders}},
		// The same for keys whose word is also an ordinary one (token,
		// *_key): the value must be 8 bytes or longer. AWS_SESSION_TOKEN,
		// the SecretAccessKey and Token of instance metadata and STS JSON.
		{Name: "token_assignment", Pattern: `(?i)(?:^|[^A-Za-z0-9_.:/-])[A-Za-z0-9_.-]*(?:token|_key|apikey|accesskey|privatekey)` + assignValue(8),
			Keywords: []string{"token", "_key", "apikey", "accesskey", "privatekey"},
			Allow:    []Allow{placeholders, notKeys}},
		// --password x, --token "x" (the = form is an assignment).
		{Name: "secret_flag", Pattern: `(?i)(?:^|[ \t])--?(?:password|passwd|pass|token|secret|api-key|apikey|access-key|secret-key|auth-token|client-secret)[ \t]+(?:\\?"([^"\\\n]+)\\?"|'([^'\n]+)'|([^\s"'\\-][^\s"'\\]*))`,
			Keywords: []string{"-pass", "-token", "-secret", "-api-key", "-apikey", "-access-key", "-secret-key", "-auth-token", "-client-secret"},
			Allow:    []Allow{placeholders}},
		// The keys pass, pwd and dsn on their own (an INI or YAML key, a
		// connection string's Pwd=).
		{Name: "short_secret_key", Pattern: `(?i)(?:^|[^A-Za-z0-9_.:/-])(?:pass|pwd|dsn)` + assignValue(1),
			Keywords: []string{"pass", "pwd", "dsn"},
			Allow:    []Allow{placeholders}},
		// <password>x</password>, <db.secret attr="…">x</db.secret>.
		{Name: "xml_secret", Pattern: `(?i)<[A-Za-z0-9_.:-]*(?:password|passwd|pwd|passphrase|secret|token|api_?key|credentials?)[A-Za-z0-9_.:-]*(?:[ \t][^>\n]*)?>([^<\n]+)</`,
			Keywords: []string{"password", "passwd", "pwd", "passphrase", "secret", "token", "apikey", "api_key", "credential"},
			// <UserSecretsId>, <token_url>: the tag names an id or a place.
			Allow: []Allow{placeholders, {Target: "match", Regexes: []string{`(?i)^<[A-Za-z0-9_.:-]*(?:id|name|type|path|file|url|uri)[ \t>]`}}}},
		// curl -u user:pass, curl --user=user:pass: both.
		// The command may go on over lines ending in '\'.
		{Name: "curl_user", Pattern: `curl[ \t](?:[^\n]|\\\n)*?(?:[ \t]-u|--user)(?:[ \t]*|=)["']?([^\s:"']*:[^\s"')]+)`,
			Keywords: []string{"curl"},
			// gitleaks' curl-auth-user allowlist: test values and variables.
			Allow: []Allow{placeholders, {Regexes: []string{"(?i):(?:change(?:it|me)|pass(?:word)?|pwd|test|token|\\*+|x+|y+)$", ":[$`{\\[<]"}}}},
		// redis-cli -a PASS (also --pass), sshpass -p PASS (also -pPASS).
		{Name: "cli_password", Pattern: `(?:redis-cli[ \t][^\n]*?[ \t](?:-a|--pass)|sshpass[ \t](?:[^\n]*?[ \t])?-p)[ \t]*["']?([^\s"'-][^\s"']*)`,
			Keywords: []string{"redis-cli", "sshpass"}},
		// A ~/.pgpass line, hostname:port:database:username:password.
		// Five fields exactly: a MAC address has six, an IPv6 address a
		// port that is not decimal.
		// Its keywords are the port field's start, so that lines without
		// one (most output) are not searched.
		{Name: "pgpass_line", Pattern: `(?:^|[^A-Za-z0-9_.*:/-])[A-Za-z0-9_.*-]+:(?:[0-9]{2,5}|\*):[^:\s"'()]+:[^:\s"'()]+:([^:\s"'()]+)(?:[\s"'()]|$)`,
			Keywords: []string{":0", ":1", ":2", ":3", ":4", ":5", ":6", ":7", ":8", ":9", ":*"}},
		// A row of the credentials.csv the AWS console gives: the secret
		// access key after its key id.
		{Name: "aws_credentials_csv", Pattern: `(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}[ \t]*,[ \t]*"?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+]|$)`,
			Keywords: []string{"a3t", "akia", "asia", "abia", "acca"}},
		// Okta API tokens: Authorization: SSWS 00….
		{Name: "okta_ssws", Pattern: `SSWS[ \t]+([A-Za-z0-9_-]{20,})`,
			Keywords: []string{"ssws"}},
		// The signature of an Azure shared access signature (SAS) URL or
		// connection string.
		{Name: "azure_sas_sig", Pattern: `[?&;]sig=([A-Za-z0-9%+/=._-]{16,})`,
			Keywords: []string{"sig="}},
		// Rules gitleaks' generators define and test but its default
		// configuration leaves out (source rule ids square-secret,
		// trello-access-token).
		{Name: "square_secret", Pattern: `\b(sq0csp-[\w-]{43})(?:[^0-9A-Za-z_-]|$)`,
			Keywords: []string{"sq0csp-"}},
		{Name: "trello_access_token", Pattern: `(?i)[\w.-]{0,50}?trello[ \t\w.-]{0,20}[\s'"]{0,3}(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)[\x60'"\s=]{0,5}([a-zA-Z0-9-]{32})(?:[^0-9A-Za-z_-]|$)`,
			Keywords: []string{"trello"}},
		{Name: "discord_webhook", Pattern: `discord(?:app)?\.com/api/webhooks/[0-9]+/([A-Za-z0-9_-]{60,})`,
			Keywords: []string{"discord"}},
		// mysql -pSECRET: the password glued to -p (-P is the port).
		{Name: "mysql_password_flag", Pattern: `mysql[a-z]*[ \t][^\n]*?[ \t]-p([^\s-]\S*)`,
			Keywords: []string{"mysql"}},
		// A long random-looking value next to a key that hints at a
		// secret (session_id, signing_salt, auth_value …).
		{Name: "high_entropy_value", Pattern: `(?i)[A-Za-z0-9_.-]*(?:key|token|secret|auth|cred|pass|sig|salt|cookie|session)[A-Za-z0-9_.-]*["']?[ \t]*(?:=|:=|=>|:)[ \t]*["']?([A-Za-z0-9+/=_.~-]{20,})`,
			Keywords: []string{"key", "token", "secret", "auth", "cred", "pass", "sig", "salt", "cookie", "session"},
			Entropy:  3.5, Allow: []Allow{placeholders, notKeys, identifiers,
				// A token filled in by hand: xoxp-…-####.
				{Target: "line", Regexes: []string{`[A-Za-z0-9]-#{4,}`}}}},
	}
}

// assignValue is the tail of an assignment pattern: an optional closing
// quote of the key (JSON-escaped or not), the operator, and the value in
// double quotes (escaped or not), single quotes or bare, at least min
// bytes. A bare value ends at a space, a quote, a separator or a closing
// bracket.
func assignValue(min int) string {
	n := fmt.Sprintf("{%d,}", min)
	return `\\?["']?(?:[ \t]+(?:=|:=|=>)[ \t]*|(?:=|:=|=>)|[ \t]*:[ \t]*)(?:\\"([^"\\\n]` + n + `)\\"|"([^"\n]` + n + `)"|'([^'\n]` + n + `)'|([^\s"'\\,;&)\]}]` + n + `))`
}
