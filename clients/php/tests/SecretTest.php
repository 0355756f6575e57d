<?php

declare(strict_types=1);

namespace Baton\Tests;

use Baton\Client;
use Baton\Exception\BatonException;
use Baton\Exception\UnauthorizedException;
use Baton\SimpleLock;
use Baton\Symfony\BatonStore;
use Baton\Tests\Support\BatonTestCase;
use Symfony\Component\Lock\Key;

/**
 * The API key is never printed: whatever a program dumps of the client, its
 * leases and sessions, or the exceptions it throws (traces with arguments
 * included, as zend.exception_ignore_args=0 in phpunit.xml.dist makes them).
 */
final class SecretTest extends BatonTestCase
{
    public function testNoDumpOfTheClientOrWhatItMadeShowsTheKey(): void
    {
        $key = (string) getenv('BATON_API_KEY');
        self::assertGreaterThan(30, strlen($key));
        // Each round dumps a lot, slowly on a loaded machine: what it takes
        // outlives the round.
        foreach ([new Client(), new Client(apiKey: $key), new Client((string) getenv('BATON_URL'), $key)] as $c) {
            $name = $this->name();
            $lease = $c->acquire($name, ttl: 60.0, wait: 0.0);
            $session = $c->session(ttl: 60.0);
            $ticket = $c->enqueue($name);
            $simple = new SimpleLock($c);
            $simple->lock($this->name(), 0, 60);
            $store = new BatonStore($c, 60.0);
            $held = null;
            try {
                $c->acquire($name, wait: 0.0);
            } catch (BatonException $held) {
            }
            self::assertNotNull($held);
            foreach ([$c, $lease, $session, $ticket, $simple, $store, $held, [$c, $held]] as $thing) {
                $this->assertKeyNotIn($key, $thing);
            }
            self::assertStringNotContainsString($key, $held->getTraceAsString());
            self::assertStringNotContainsString($key, (string) $held);
            $simple->unlockAll();
            $session->close();
            $lease->release();
        }
    }

    public function testARejectedKeyIsNotInTheError(): void
    {
        $wrong = 'bk_' . bin2hex(random_bytes(22));
        $c = new Client(apiKey: $wrong);
        try {
            $c->acquire($this->name(), wait: 0.0);
            self::fail('an unknown key was accepted');
        } catch (UnauthorizedException $e) {
            $this->assertKeyNotIn($wrong, $e);
            self::assertStringNotContainsString($wrong, $e->getTraceAsString());
            self::assertStringNotContainsString($wrong, (string) $e);
        }
        $this->assertKeyNotIn($wrong, $c);
    }

    public function testTheClientCannotBeSerialized(): void
    {
        $this->expectException(\LogicException::class);
        serialize(new Client());
    }

    public function testASymfonyKeyCarriesTheLeaseButNotTheApiKey(): void
    {
        $key = (string) getenv('BATON_API_KEY');
        $store = new BatonStore(new Client(), 5.0);
        $k = new Key($this->name());
        $store->save($k);
        $s = serialize($k);
        self::assertStringNotContainsString($key, $s);
        $store->delete(unserialize($s));
        self::assertFalse($store->exists($k));
    }

    private function assertKeyNotIn(string $key, mixed $thing): void
    {
        $dumps = [];
        ob_start();
        var_dump($thing);
        $dumps['var_dump'] = (string) ob_get_clean();
        $dumps['print_r'] = print_r($thing, true);
        $dumps['var_export'] = @var_export($thing, true); // it warns about the exceptions' recursion
        $dumps['json_encode'] = (string) json_encode($thing);
        $dumps['array cast'] = print_r(is_object($thing) ? (array) $thing : $thing, true);
        foreach ($dumps as $how => $out) {
            self::assertStringNotContainsString($key, $out, "$how shows the key");
        }
    }
}
