<?php

declare(strict_types=1);

namespace Baton\Internal;

use Baton\Exception\ConnectionException;
use Baton\Exception\InvalidArgumentException;

/**
 * Transport sends requests to Baton over one reused curl handle, and retries
 * what may be retried: a request that got no answer (a transport error) or a
 * 429, 502, 503 or 504, with backoff and jitter, honouring Retry-After, for as
 * long as the retry budget lasts. A POST carries an Idempotency-Key, the same
 * on every retry, with the same body: a lost answer never leaves a second hold
 * behind.
 *
 * The API key is kept out of this object's properties (in a WeakMap keyed by
 * the object), so that var_dump, print_r, var_export, serialize and exception
 * traces of a client never show it; and it is never passed as an argument to a
 * function that could end up in a trace.
 *
 * @internal
 */
final class Transport
{
    /** @var \WeakMap<Transport, string>|null */
    private static ?\WeakMap $keys = null;

    /** Statuses that mean "not done, try again" (from Baton or a proxy). */
    private const RETRY_STATUSES = [429, 502, 503, 504];

    private ?\CurlHandle $curl = null;

    /** @var array<string, string> the last answer's headers */
    private array $headers = [];

    /** The process that made $curl: a forked child makes its own handle. */
    private int $curlPid = 0;

    /**
     * The constructor never throws (a trace of it would show its arguments on
     * PHP 8.1, where #[\SensitiveParameter] does nothing): a bad URL is
     * reported by the first request.
     */
    public function __construct(
        private readonly string $base,
        #[\SensitiveParameter] ?string $apiKey,
        public readonly float $timeout,
        public readonly float $retryFor
    ) {
        self::$keys ??= new \WeakMap();
        if ($apiKey !== null && $apiKey !== '') {
            self::$keys[$this] = $apiKey;
        }
    }

    public function hasKey(): bool
    {
        return self::$keys !== null && isset(self::$keys[$this]);
    }

    /**
     * The server's URL without credentials, for messages.
     */
    public function where(): string
    {
        $u = parse_url($this->base);
        if (!is_array($u) || !isset($u['scheme'], $u['host'])) {
            return '(an invalid URL)';
        }

        return $u['scheme'] . '://' . $u['host'] . (isset($u['port']) ? ':' . $u['port'] : '') . ($u['path'] ?? '');
    }

    /**
     * Sends $method $path with the JSON $body (null: none) and returns the
     * answer, whatever its status, once it is not one to retry or the retry
     * budget ($wait plus retryFor from now) is spent. $wait is how long the
     * server may hold the request (a long-poll); $op and $lock name the call
     * in messages. A long-poll GET that can simply be sent again by its caller
     * passes $retryGateway false: a 502 or 504 (a proxy's timeout cutting the
     * poll) then comes back at once instead of being retried here.
     *
     * @param array<string, mixed>|null $body
     *
     * @throws ConnectionException       when no answer came within the budget
     * @throws InvalidArgumentException  for a bad server URL or a body JSON cannot encode
     */
    public function send(
        string $method,
        string $path,
        ?array $body,
        float $wait,
        string $op,
        ?string $lock = null,
        bool $retryGateway = true
    ): Response {
        $this->checkBase();
        $payload = $body === null ? null : self::encode($body);
        $idempotencyKey = $method === 'POST' ? bin2hex(random_bytes(16)) : null;
        $start = microtime(true);
        $deadline = $start + $wait + $this->retryFor;
        $backoff = 0.05;
        for ($attempt = 1;; $attempt++) {
            [$status, $raw, $errno, $error] = $this->perform($method, $path, $payload, $wait, $idempotencyKey);
            $headers = $this->headers;
            $gateway = $status === 502 || $status === 504;
            if ($errno === 0 && (!in_array($status, self::RETRY_STATUSES, true) || ($gateway && !$retryGateway))) {
                return new Response($status, $headers, self::decode($headers, $raw), $attempt);
            }
            $pause = $backoff * (0.5 + mt_rand() / mt_getrandmax() / 2);
            $retryAfter = $errno === 0 && isset($headers['retry-after']) && is_numeric($headers['retry-after'])
                ? (float) $headers['retry-after'] : null;
            $left = $deadline - microtime(true);
            if ($retryAfter !== null) {
                $pause = max($pause, $retryAfter); // never sooner than the server asked
            } else {
                $pause = min($pause, $left); // the budget's last moment for one more try
            }
            if ($pause > $left || $left <= 0.001) {
                if ($errno !== 0) {
                    throw new ConnectionException(sprintf(
                        '%s: no answer from Baton at %s (%s, curl error %d) after %d attempt%s in %.1f s',
                        $op,
                        $this->where(),
                        $error,
                        $errno,
                        $attempt,
                        $attempt === 1 ? '' : 's',
                        microtime(true) - $start
                    ), '', 0, $error, null, null, null, $lock);
                }

                return new Response($status, $headers, self::decode($headers, $raw), $attempt);
            }
            usleep((int) ($pause * 1e6));
            $backoff = min($backoff * 2, 1.0);
        }
    }

    /**
     * Sends one request. Returns [status, body, curl errno, curl error]; the
     * answer's headers land in $this->headers (lower-cased names).
     *
     * @return array{int, string, int, string}
     */
    private function perform(
        string $method,
        string $path,
        ?string $payload,
        float $wait,
        ?string $idempotencyKey
    ): array {
        $this->headers = [];
        $headers = &$this->headers;
        $curl = $this->handle();
        curl_reset($curl);
        $lines = ['Accept: application/json, application/problem+json', 'User-Agent: baton-php/1', 'Expect:'];
        if (self::$keys !== null && isset(self::$keys[$this])) {
            $lines[] = 'Authorization: Bearer ' . self::$keys[$this];
        }
        if ($payload !== null) {
            $lines[] = 'Content-Type: application/json';
        }
        if ($idempotencyKey !== null) {
            $lines[] = 'Idempotency-Key: ' . $idempotencyKey;
        }
        $options = [
            CURLOPT_URL => $this->base . $path,
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_HTTPHEADER => $lines,
            CURLOPT_HEADERFUNCTION => static function ($curl, string $line) use (&$headers): int {
                if (str_starts_with($line, 'HTTP/')) {
                    $headers = []; // a new answer (after a 1xx)
                } elseif (str_contains($line, ':')) {
                    [$name, $value] = explode(':', $line, 2);
                    $headers[strtolower(trim($name))] = trim($value);
                }

                return strlen($line);
            },
            CURLOPT_CONNECTTIMEOUT_MS => (int) ceil($this->timeout * 1000),
            CURLOPT_TIMEOUT_MS => (int) ceil(($this->timeout + $wait) * 1000),
            CURLOPT_NOSIGNAL => true,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
        ];
        if ($payload !== null) {
            $options[CURLOPT_POSTFIELDS] = $payload;
        }
        if ($method === 'DELETE') {
            // libcurl quietly sends a request again when a reused connection
            // turns out dead with no answer yet. For a release that hides a lost
            // answer from send(), which must know: a 404 after a lost answer
            // means released, not lost. A fresh connection is never resent.
            $options[CURLOPT_FRESH_CONNECT] = true;
        }
        curl_setopt_array($curl, $options);
        unset($lines);
        $raw = curl_exec($curl);
        $errno = curl_errno($curl);
        $error = $errno === 0 ? '' : curl_error($curl);
        $status = $errno === 0 ? (int) curl_getinfo($curl, CURLINFO_RESPONSE_CODE) : 0;
        curl_setopt($curl, CURLOPT_HTTPHEADER, []); // the key stays in the handle no longer than the request

        return [$status, is_string($raw) ? $raw : '', $errno, $error];
    }

    private function handle(): \CurlHandle
    {
        $pid = getmypid();
        if ($this->curl === null || $this->curlPid !== $pid) {
            $curl = curl_init();
            if ($curl === false) {
                throw new ConnectionException('curl_init failed');
            }
            $this->curl = $curl;
            $this->curlPid = (int) $pid;
        }

        return $this->curl;
    }

    private function checkBase(): void
    {
        $u = parse_url($this->base);
        if (!is_array($u) || !in_array($u['scheme'] ?? '', ['http', 'https'], true) || ($u['host'] ?? '') === '') {
            throw new InvalidArgumentException('the Baton URL (argument, else BATON_URL) must be an http(s):// URL');
        }
    }

    /**
     * @param array<string, mixed> $body
     */
    private static function encode(array $body): string
    {
        if ($body === []) {
            return '{}';
        }
        try {
            return json_encode($body, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
        } catch (\JsonException $e) {
            $why = 'the request cannot be sent as JSON (is every string valid UTF-8?): ' . $e->getMessage();
            throw new InvalidArgumentException($why, 0, $e);
        }
    }

    /**
     * @param array<string, string> $headers
     *
     * @return array<string, mixed>|null
     */
    private static function decode(array $headers, string $raw): ?array
    {
        if (!str_contains($headers['content-type'] ?? '', 'json') || $raw === '') {
            return null;
        }
        $v = json_decode($raw, true);

        return is_array($v) ? $v : null;
    }

    /**
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return [
            'url' => $this->where(),
            'apiKey' => $this->hasKey() ? '[redacted]' : null,
            'timeout' => $this->timeout,
            'retryFor' => $this->retryFor,
        ];
    }

    /**
     * @return never
     */
    public function __serialize(): array
    {
        throw new \LogicException('a Baton client cannot be serialized; make a new one where it is needed');
    }

    private function __clone()
    {
    }
}
