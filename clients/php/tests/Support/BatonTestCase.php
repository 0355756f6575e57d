<?php

declare(strict_types=1);

namespace Baton\Tests\Support;

use Baton\Client;
use PHPUnit\Framework\TestCase;

/**
 * BatonTestCase gives a test the Baton server php_test.go started (BATON_URL,
 * with BATON_API_KEY the key that may do everything), its fault proxy
 * (BATON_PROXY_URL, driven through BATON_PROXY_CONTROL), the other test keys,
 * and a fresh lock name per test.
 */
abstract class BatonTestCase extends TestCase
{
    protected function setUp(): void
    {
        foreach (['BATON_URL', 'BATON_PROXY_URL', 'BATON_PROXY_CONTROL', 'BATON_API_KEY'] as $v) {
            if (getenv($v) === false) {
                self::markTestSkipped("$v is not set: run these tests through `go test ./clients/php` (make test)");
            }
        }
        $this->proxy('reset');
    }

    protected function tearDown(): void
    {
        $this->proxy('reset');
    }

    /**
     * A lock name of this test's own: "$prefix" + the test's name + random.
     */
    protected function name(string $prefix = 't:'): string
    {
        $test = (string) preg_replace('/[^A-Za-z0-9]+/', '-', $this->getName(false));

        return $prefix . substr($test, 0, 60) . ':' . bin2hex(random_bytes(4));
    }

    /**
     * A client of the server through the fault proxy.
     */
    protected function viaProxy(float $retryFor = 5.0, ?string $apiKey = null): Client
    {
        return new Client(url: (string) getenv('BATON_PROXY_URL'), apiKey: $apiKey, retryFor: $retryFor);
    }

    protected static function key(string $which): string
    {
        return (string) getenv('BATON_TEST_KEY_' . strtoupper($which));
    }

    /**
     * Sends a control request to the fault proxy (see internal/batontest/proxy.go).
     *
     * @param array<string, scalar> $query
     */
    protected function proxy(string $what, array $query = []): void
    {
        $url = getenv('BATON_PROXY_CONTROL') . '/' . $what . ($query === [] ? '' : '?' . http_build_query($query));
        $ctx = stream_context_create(['http' => ['method' => 'POST', 'timeout' => 5, 'ignore_errors' => true]]);
        if (@file_get_contents($url, false, $ctx) === false) {
            self::fail("the fault proxy did not answer /$what");
        }
    }

    /**
     * Requests the fault proxy saw whose path starts with $prefix.
     */
    protected function seen(string $prefix): int
    {
        $url = getenv('BATON_PROXY_CONTROL') . '/count?' . http_build_query(['path' => $prefix]);
        $body = file_get_contents($url);
        $v = json_decode((string) $body, true);

        return (int) ($v['requests'] ?? -1);
    }

    /**
     * A PHP process running tests/Support/worker.php with $args.
     *
     * @param list<string> $args
     */
    protected function worker(array $args): Worker
    {
        return new Worker($args);
    }
}
