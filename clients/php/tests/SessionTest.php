<?php

declare(strict_types=1);

namespace Baton\Tests;

use Baton\Client;
use Baton\Exception\LockHeldException;
use Baton\Exception\SessionNotFoundException;
use Baton\Session;
use Baton\Tests\Support\BatonTestCase;

/**
 * Sessions: many holds, one heartbeat, released together.
 */
final class SessionTest extends BatonTestCase
{
    public function testHoldsInASessionAreRenewedAndReleasedTogether(): void
    {
        $c = new Client();
        [$a, $b] = [$this->name(), $this->name()];
        $s = $c->session(ttl: 5.0, owner: 'php-request-1');
        self::assertSame('php-request-1', $s->owner);
        self::assertEqualsWithDelta(5.0, $s->ttl(), 0.2);
        $la = $s->acquire($a, wait: 0.0);
        $lb = $s->acquire($b, wait: 0.0, shared: true);
        self::assertSame($s, $la->session());
        self::assertTrue($lb->shared);
        $holds = $s->holds();
        self::assertCount(2, $holds);
        self::assertEqualsCanonicalizing([$a, $b], array_column($holds, 'name'));

        $s->renew(30.0);
        self::assertGreaterThan(20000, $c->state($a)['ttl_ms'], 'the holds were renewed with the session');
        self::assertGreaterThan(20000, $c->state($b)['ttl_ms']);

        self::assertSame(2, $s->close());
        self::assertTrue($s->isClosed());
        self::assertFalse($c->state($a)['held']);
        self::assertFalse($c->state($b)['held']);
        self::assertSame(0, $s->close(), 'closing twice does nothing');
        $this->expectException(SessionNotFoundException::class);
        $s->acquire($a);
    }

    public function testWithSessionClosesOnEveryWayOut(): void
    {
        $c = new Client();
        [$a, $b] = [$this->name(), $this->name()];
        $fences = $c->withSession(function (Session $s) use ($a, $b) {
            return [$s->acquire($a, wait: 0.0)->fence, $s->acquire($b, wait: 0.0)->fence];
        }, ttl: 10.0);
        self::assertCount(2, $fences);
        self::assertFalse($c->state($a)['held']);
        self::assertFalse($c->state($b)['held']);

        try {
            $c->withSession(function (Session $s) use ($a) {
                $s->acquire($a, wait: 0.0);
                throw new \RuntimeException('request failed');
            });
            self::fail('the exception was swallowed');
        } catch (\RuntimeException $e) {
            self::assertSame('request failed', $e->getMessage());
        }
        self::assertFalse($c->state($a)['held'], 'released after an exception');
    }

    public function testASessionNotRenewedEndsWithItsHolds(): void
    {
        $c = new Client();
        $a = $this->name();
        $s = $c->session(ttl: 1.0);
        $lease = $s->acquire($a, wait: 0.0);
        usleep(1_500_000); // let the session run out: that is the point
        self::assertFalse($c->state($a)['held']);
        self::assertFalse($lease->isHeld());
        try {
            $s->renew();
            self::fail('renewed an ended session');
        } catch (SessionNotFoundException $e) {
            self::assertSame(404, $e->status);
            self::assertSame('/problems/session-not-found', $e->type);
        }
        self::assertTrue($s->isLost());
    }

    public function testASessionHoldReleasedAloneLeavesTheSession(): void
    {
        $c = new Client();
        [$a, $b] = [$this->name(), $this->name()];
        $s = $c->session(ttl: 10.0);
        $s->acquire($a, wait: 0.0)->release();
        $s->acquire($b, wait: 0.0);
        self::assertSame([$b], array_column($s->holds(), 'name'));
        self::assertSame(1, $s->close());
    }

    public function testAFairWaitInASessionJoinsItOnceGranted(): void
    {
        $c = new Client();
        $a = $this->name();
        $holder = $c->acquire($a, ttl: 0.5, wait: 0.0);
        $s = $c->session(ttl: 10.0);
        $lease = $s->acquire($a, wait: 5.0, fair: true);
        self::assertGreaterThan($holder->fence, $lease->fence);
        self::assertSame([$a], array_column($s->holds(), 'name'));
        try {
            $s->acquire($a, wait: 0.0);
            self::fail('a session does not re-enter by name');
        } catch (LockHeldException) {
        }
        self::assertSame(1, $s->close());
    }
}
