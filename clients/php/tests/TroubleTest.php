<?php

declare(strict_types=1);

namespace Baton\Tests;

use Baton\Client;
use Baton\Exception\ConnectionException;
use Baton\Exception\ForbiddenException;
use Baton\Exception\LeaseLostException;
use Baton\Exception\OverloadedException;
use Baton\Exception\UnauthorizedException;
use Baton\Exception\UnavailableException;
use Baton\Tests\Support\BatonTestCase;

/**
 * Issue 12, "Behaviour under trouble", through the fault proxy in front of a
 * real Baton: server down, restarting, 503 with Retry-After, a renewal that
 * gets 404, a POST whose answer is cut, a long-poll cut by a proxy timeout,
 * a key rejected.
 */
final class TroubleTest extends BatonTestCase
{
    public function testServerDownIsAConnectionErrorAfterTheRetryBudget(): void
    {
        $server = stream_socket_server('tcp://127.0.0.1:0');
        self::assertIsResource($server);
        $addr = stream_socket_get_name($server, false);
        fclose($server); // nothing listens there now: connection refused

        $c = new Client(url: "http://$addr", retryFor: 0.5);
        $start = microtime(true);
        try {
            $c->acquire('t:down', wait: 0.0);
            self::fail('acquired from nowhere');
        } catch (ConnectionException $e) {
            self::assertInstanceOf(UnavailableException::class, $e);
            self::assertSame(0, $e->status);
            self::assertSame('t:down', $e->lock);
            $says = 'acquire "t:down": no answer from Baton at http://' . $addr;
            self::assertStringContainsString($says, $e->getMessage());
            self::assertMatchesRegularExpression('/after [2-9]\d* attempts/', $e->getMessage(), 'retried');
        }
        $took = microtime(true) - $start;
        self::assertGreaterThan(0.45, $took, 'tried for the whole budget');
        self::assertLessThan(5.0, $took, 'and for its own budget, not the default 10 s');
    }

    public function testAServerRestartingIsRiddenOut(): void
    {
        $name = $this->name();
        $this->proxy('down', ['on' => 1]);
        $w = $this->worker(['proxy-up', '-', '0.6']);
        $start = microtime(true);
        $lease = $this->viaProxy()->acquire($name, ttl: 5.0, wait: 0.0);
        self::assertGreaterThan(0.4, microtime(true) - $start, 'answered only once the proxy was up');
        $w->expect('up');
        self::assertSame(0, $w->wait());
        self::assertSame(1, (new Client())->state($name)['holders']);
        self::assertTrue($lease->release());
    }

    /** @return array<string, array{string}> */
    public static function unavailableKinds(): array
    {
        return ['store-unavailable' => ['store-unavailable'], 'overloaded' => ['overloaded']];
    }

    /** @dataProvider unavailableKinds */
    public function testA503WithRetryAfterIsRetriedAfterIt(string $kind): void
    {
        $name = $this->name();
        $this->proxy('status', ['code' => 503, 'n' => 1, 'path' => "/v1/locks/$name", 'retry_after' => 1, 'type' => $kind]);
        $start = microtime(true);
        $lease = $this->viaProxy()->acquire($name, wait: 0.0);
        self::assertGreaterThanOrEqual(0.95, microtime(true) - $start, 'waited Retry-After');
        self::assertSame(2, $this->seen("/v1/locks/$name"));
        self::assertTrue($lease->release());

        // One that stays 503 beyond the budget is an UnavailableException.
        $this->proxy('status', ['code' => 503, 'n' => 50, 'path' => "/v1/locks/$name", 'retry_after' => 1, 'type' => $kind]);
        try {
            $this->viaProxy(retryFor: 1.5)->acquire($name, wait: 0.0);
            self::fail('acquired through a 503');
        } catch (UnavailableException $e) {
            self::assertSame(503, $e->status);
            self::assertSame("/problems/$kind", $e->type);
            self::assertSame(1.0, $e->retryAfter);
            self::assertSame($kind === 'overloaded', $e instanceof OverloadedException);
        }
    }

    public function testGatewayErrorsOnEveryMethodAreRetried(): void
    {
        $name = $this->name();
        $c = $this->viaProxy();
        foreach ([502, 504] as $code) {
            $this->proxy('status', ['code' => $code, 'n' => 1, 'path' => "/v1/locks/$name", 'method' => 'POST']);
            $lease = $c->acquire($name, ttl: 5.0, wait: 0.0);
            $this->proxy('status', ['code' => $code, 'n' => 1, 'path' => $lease->url, 'method' => 'PATCH']);
            $lease->renew(6.0);
            $this->proxy('status', ['code' => $code, 'n' => 1, 'path' => $lease->url, 'method' => 'DELETE']);
            self::assertTrue($lease->release());
        }
        self::assertFalse($c->state($name)['held']);
    }

    public function testARenewalAnswered404MarksTheLeaseLost(): void
    {
        $c = $this->viaProxy();
        $name = $this->name();
        $lease = $c->acquire($name, ttl: 0.2, wait: 0.0);
        usleep(400_000); // let the lease run out: that is the point
        try {
            $lease->renew();
            self::fail('renewed an expired lease');
        } catch (LeaseLostException $e) {
            self::assertSame(404, $e->status);
            self::assertSame('/problems/lease-not-held', $e->type);
        }
        self::assertTrue($lease->isLost());
        self::assertFalse($lease->isHeld());

        // Later calls raise at once, without asking the server.
        $seen = $this->seen($lease->url);
        foreach ([fn () => $lease->renew(), fn () => $lease->release()] as $call) {
            try {
                $call();
                self::fail('a call on a lost lease went through');
            } catch (LeaseLostException $e) {
                self::assertStringContainsString('lost', $e->getMessage());
            }
        }
        self::assertSame($seen, $this->seen($lease->url));

        // Taken by force is lost the same way, and a later hold is not touched.
        $mine = $c->acquire($name, ttl: 5.0, wait: 0.0);
        $c->forceRelease($name);
        $next = $c->acquire($name, ttl: 5.0, wait: 0.0);
        try {
            $mine->renew();
            self::fail('renewed a forced lease');
        } catch (LeaseLostException) {
        }
        self::assertTrue($next->isHeld());
        self::assertTrue($next->release());
    }

    public function testAPostWhoseAnswerIsCutIsRetriedWithTheSameKey(): void
    {
        $name = $this->name();
        $this->proxy('cut', ['n' => 1, 'path' => "/v1/locks/$name", 'method' => 'POST']);
        $lease = $this->viaProxy()->acquire($name, ttl: 10.0, wait: 0.0);
        // Baton granted the first POST; the retry, with the same Idempotency-Key
        // and body, got that same hold back instead of a 423 or a second hold.
        self::assertGreaterThanOrEqual(2, $this->seen("/v1/locks/$name"));
        $state = (new Client())->state($name);
        self::assertSame(1, $state['holders']);
        self::assertSame($lease->fence, $state['fence']);
        self::assertTrue($lease->release());
        self::assertFalse((new Client())->state($name)['held'], 'no hold left behind');

        // The same for a fair POST (its ticket) and a shared one.
        $holder = (new Client())->acquire($name, ttl: 0.5, wait: 0.0);
        $this->proxy('cut', ['n' => 1, 'path' => "/v1/locks/$name", 'method' => 'POST']);
        $lease = $this->viaProxy()->acquire($name, ttl: 10.0, wait: 3.0, fair: true);
        self::assertGreaterThan($holder->fence, $lease->fence);
        $state = (new Client())->state($name);
        self::assertSame(1, $state['holders']);
        self::assertSame(0, $state['waiters']);
        $lease->release();

        $this->proxy('cut', ['n' => 1, 'path' => "/v1/locks/$name", 'method' => 'POST']);
        $lease = $this->viaProxy()->acquire($name, wait: 0.0, shared: true);
        self::assertSame(1, (new Client())->state($name)['holders']);
        $lease->release();
    }

    public function testOtherAnswersCutAreAskedAgain(): void
    {
        $c = $this->viaProxy();
        $name = $this->name();

        // A poll whose answer (the grant) is lost: the next poll gets the lease.
        $holder = (new Client())->acquire($name, ttl: 0.5, wait: 0.0);
        $ticket = $c->enqueue($name, ttl: 5.0);
        self::assertInstanceOf(\Baton\Ticket::class, $ticket);
        $this->proxy('cut', ['n' => 1, 'path' => $ticket->url]);
        $lease = $ticket->poll(5.0);
        self::assertNotNull($lease);
        self::assertGreaterThan($holder->fence, $lease->fence);
        self::assertSame(2, $this->seen($ticket->url));

        // A renewal and a release whose answers are lost.
        $this->proxy('cut', ['n' => 1, 'path' => $lease->url, 'method' => 'PATCH']);
        $lease->renew(10.0);
        self::assertGreaterThan(8000, (new Client())->state($name)['ttl_ms']);
        $this->proxy('cut', ['n' => 1, 'path' => $lease->url, 'method' => 'DELETE']);
        self::assertTrue($lease->release(), 'the retry found it released: released');
        self::assertFalse((new Client())->state($name)['held']);
    }

    public function testASessionPostWhoseAnswerIsCutMakesOneSession(): void
    {
        $this->proxy('cut', ['n' => 1, 'path' => '/v1/sessions', 'method' => 'POST']);
        $c = $this->viaProxy();
        $s = $c->session(ttl: 5.0);
        self::assertGreaterThanOrEqual(2, $this->seen('/v1/sessions'));
        $s->acquire($this->name(), wait: 0.0);
        self::assertSame(1, $s->close());
    }

    public function testALongPollCutByAProxyTimeoutIsPolledAgain(): void
    {
        $name = $this->name();
        $holder = (new Client())->acquire($name, ttl: 1.2, wait: 0.0);
        $this->proxy('timeout', ['ms' => 250, 'path' => "/v1/locks/$name"]);
        $start = microtime(true);
        $lease = $this->viaProxy()->acquire($name, ttl: 5.0, wait: 10.0, fair: true);
        $took = microtime(true) - $start;
        self::assertGreaterThan($holder->fence, $lease->fence);
        self::assertGreaterThan(0.9, $took);
        self::assertLessThan(8.0, $took, 'granted when the hold ran out, not when the 10 s wait did');
        self::assertGreaterThanOrEqual(3, $this->seen("/v1/locks/$name"), 'polled again after each 504');
        $lease->release();

        // A non-fair long POST cut the same way is sent again (same key, same body).
        $holder = (new Client())->acquire($name, ttl: 1.0, wait: 0.0);
        $lease = $this->viaProxy()->acquire($name, ttl: 5.0, wait: 10.0);
        self::assertGreaterThan($holder->fence, $lease->fence);
        self::assertSame(1, (new Client())->state($name)['holders']);
        $lease->release();

        // And a watch.
        $holder = (new Client())->acquire($name, ttl: 1.0, wait: 0.0);
        $state = $this->viaProxy()->state($name, wait: 10.0);
        self::assertFalse($state['held']);
        self::assertSame($holder->fence, $state['fence']);
    }

    public function testARejectedKeyIsAClearErrorAndNeverRetried(): void
    {
        $name = $this->name('client:');
        $wrong = 'bk_' . str_repeat('x', 43);
        try {
            $this->viaProxy(apiKey: $wrong)->acquire($name, wait: 0.0);
            self::fail('acquired with an unknown key');
        } catch (UnauthorizedException $e) {
            self::assertSame(401, $e->status);
            self::assertSame('/problems/unauthorized', $e->type);
            self::assertStringContainsString("acquire \"$name\": 401 unauthorized", $e->getMessage());
            self::assertStringNotContainsString($wrong, $e->getMessage());
        }
        self::assertSame(1, $this->seen("/v1/locks/$name"), 'asked once');

        $other = $this->name('other:');
        try {
            $this->viaProxy(apiKey: self::key('limited'))->acquire($other, wait: 0.0);
            self::fail('acquired outside the key\'s grants');
        } catch (ForbiddenException $e) {
            self::assertSame(403, $e->status);
            self::assertStringContainsString($other, $e->getMessage(), 'names the lock');
            self::assertStringContainsString($other, $e->detail, 'Baton\'s detail names the lock too');
            self::assertStringContainsString('403 forbidden', $e->getMessage());
        }
        self::assertSame(1, $this->seen("/v1/locks/$other"), 'asked once');

        // The limited key may take locks within its grants, and the reader may only read.
        $lease = $this->viaProxy(apiKey: self::key('limited'))->acquire($name, wait: 0.0);
        self::assertTrue($this->viaProxy(apiKey: self::key('reader'))->state($name)['held']);
        try {
            $this->viaProxy(apiKey: self::key('reader'))->acquire($name, wait: 0.0);
            self::fail('a reader took a lock');
        } catch (ForbiddenException) {
        }
        // A lease belongs to the key that made it.
        try {
            (new Client())->lease($lease->url);
            self::fail('another key used the lease');
        } catch (LeaseLostException) {
        }
        self::assertTrue($lease->release());
    }
}
