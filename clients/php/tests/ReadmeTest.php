<?php

declare(strict_types=1);

namespace Baton\Tests;

use Baton\Tests\Support\BatonTestCase;

/**
 * README.md shows example.php as it is, and it runs.
 */
final class ReadmeTest extends BatonTestCase
{
    public function testTheExampleRunsAsTheReadmeShowsIt(): void
    {
        $dir = dirname(__DIR__);
        $example = (string) file_get_contents($dir . '/example.php');
        $readme = (string) file_get_contents($dir . '/README.md');
        $block = "<!-- example.php -->\n```php\n" . $example . "```\n";
        self::assertStringContainsString($block, $readme, 'README.md shows example.php');

        $proc = proc_open([PHP_BINARY, $dir . '/example.php'], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        self::assertIsResource($proc);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        self::assertSame(0, proc_close($proc), "example.php failed: $out $err");
        self::assertMatchesRegularExpression(
            '/^report written under fence \d+\nbusy: held by billing-worker-3 for \d+\.\d s more\nreleased\n$/',
            $out
        );
    }
}
